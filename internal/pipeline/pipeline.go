// Package pipeline is the one path every gated verb of milner runs
// (preview, up, up --replace, up --os-disk, adopt, teardown, upgrade,
// secrets import), in these stages:
//
//  1. observe: what the verb's rules need (the stack's config, state and
//     outputs, the substrate's inventory, the Talos API's evidence, the apps'
//     readiness), each fetched once per run, on first use (observe.go);
//  2. plan: the engine's preview, whose plan the apply takes;
//  3. judge: the verb's table of named rules (tables.go), each a function
//     of the plan and the observations; a refusal names its rule;
//  4. report: the delta by layer, the versions and every refusal;
//  5. confirm: the stack name typed, or --yes;
//  6. apply: exactly the reviewed plan;
//  7. after: the verb's after-steps (the rolling apps gate, the rejoin).
//
// Adding a rule to a verb is one line in its table, the rule's function
// and its test. cmd/milner keeps the flags, the wiring of a verb to its
// table and the printing; `milner preview --explain` lists every table
// with the file and function of each rule (Explain).
//
// The stack verbs that run no plan have their bodies here too, each one
// function that refuses with Refused: secrets generate (generate.go, on
// the stack file) and export (secrets.go), state restore and unlock
// (state.go), and the client configs (clients.go), on the open stack (Op).
package pipeline

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"

	"github.com/milner/milner/internal/gate"
)

// Stage is when a rule judges, and what its refusal does.
type Stage int

// The stages a rule judges at.
const (
	// Before judges the observations before the engine is asked to plan
	// (and before anything is touched); a refusal stops the run.
	Before Stage = iota
	// Stop judges the plan before the report; a refusal stops the run
	// (its findings printed) without a report.
	Stop
	// Report judges the plan; its refusals are reported with the delta,
	// and the verb applies nothing.
	Report
	// Last judges right before the apply, after the confirmation, what
	// must hold at that moment (the apps' readiness); a refusal stops the run.
	Last
	// Within judges inside the verb's own plan or apply stage, on what
	// only that stage observes (the cluster's answer to an apps adoption,
	// the upgrade's health gate): the stage judges each of its table's
	// Within rules where it is known (Op.judgeWithin); a refusal stops the run.
	Within
)

func (s Stage) String() string {
	return [...]string{"before the plan", "on the plan, stops", "on the plan, reported", "before the apply", "inside the verb's stage"}[s]
}

// Rule is one named refusal rule of a verb's table.
type Rule struct {
	// Name is what a refusal of the rule says it comes from.
	Name string
	// Stage is when it judges.
	Stage Stage
	// Check judges the run's plan and observations: Report rules return
	// their refusals, the other stages a *Refusal error.
	Check func(*Op) ([]gate.Refusal, error)
}

// Where is the file and function that hold the rule's check, for
// `--explain`: e.g. internal/pipeline/rules.go:layerRules.
func (r Rule) Where() string {
	f := runtime.FuncForPC(reflect.ValueOf(r.Check).Pointer())
	if f == nil {
		return "?"
	}
	file, _ := f.FileLine(f.Entry())
	if i := strings.LastIndex(file, "/internal/"); i >= 0 {
		file = file[i+1:]
	}
	name := f.Name()
	return file + ":" + name[strings.LastIndex(name, ".")+1:]
}

// Verb is one gated verb: its table and what each of its stages does.
type Verb struct {
	// Name is the verb as typed (e.g. "up").
	Name string
	// Rules are its table, in the order they judge.
	Rules []Rule
	// plan is the plan stage (the engine's preview, for most verbs).
	plan func(*Op) error
	// report builds the outcome the report prints (and --json).
	report func(*Op, []Finding) *Outcome
	// question is the confirmation asked before the apply; "" applies
	// without one (a verb whose apply changes only its own record).
	question string
	// apply applies exactly the reviewed plan; after runs once it did.
	apply func(*Op, *Outcome) error
	after func(*Op) error
	// undo, when set, runs when the run ends with an error (adopt puts the
	// stack file back).
	undo func(*Op, error) error
	// whenEmpty applies an empty delta too (a verb whose apply is no update).
	whenEmpty bool
	// verdict turns the outcome into the run's error; nil: Outcome.Verdict.
	verdict func(*Op, *Outcome) error
}

// Refusal is an error that a rule refused the operation before anything
// was changed (ExitRefused).
type Refusal struct {
	// Rule is the name of the rule that refused ("" outside a table).
	Rule string
	// Msg says what was refused and what to do instead.
	Msg string
	// Err is the refusal's kind when it is not a rule's (ErrNotConfirmed,
	// ErrNoTerminal): ExitCode maps it.
	Err error
}

// Unwrap is the refusal's kind.
func (r *Refusal) Unwrap() error { return r.Err }

func (r *Refusal) Error() string {
	if r.Rule == "" {
		return "refused: " + r.Msg
	}
	return "refused: " + r.Msg + " [rule " + r.Rule + "]"
}

// Refused returns a refusal with a formatted message.
func Refused(format string, a ...any) error { return &Refusal{Msg: fmt.Sprintf(format, a...)} }

// ErrPending is returned by --expect-no-changes when the stack has changes
// (and by docs --check on drift).
var ErrPending = errors.New("changes pending")

// ErrNotConfirmed is a confirmation the user declined: the command was
// cancelled (ExitCancelled).
var ErrNotConfirmed = errors.New("not confirmed")

// ErrNoTerminal is a confirmation asked without a terminal and without
// --yes: an invocation the command cannot run (ExitUsage), as Pulumi's
// NoConfirmationInNonInteractiveError.
var ErrNoTerminal = errors.New("no terminal to confirm on")

// The exit codes, the same for every verb: Pulumi's taxonomy, its own
// constants (sdk/v3 v3.276.0 go/common/util/cmdutil exit.go, which pkg/v3
// cmd/pulumi/cmd/exit_codes.go maps errors onto), so a script reads milner
// as it reads pulumi. Milner uses no authentication (3), resource (4),
// timeout (9) or internal (255) code: an error it cannot classify is 1, as
// Pulumi's own TODO leaves resource and policy errors of the engine.
const (
	ExitOK = cmdutil.ExitSuccess
	// ExitError is any other error.
	ExitError = cmdutil.ExitCodeError
	// ExitUsage is Pulumi's ExitConfigurationError: a flag, argument or
	// verb milner does not take, a required flag missing, a confirmation
	// without a terminal or --yes.
	ExitUsage = cmdutil.ExitConfigurationError
	// ExitRefused is Pulumi's ExitPolicyViolation: a rule (milner's
	// pipeline, the policy pack, the lifecycle hooks' gate) refused, and
	// nothing was changed.
	ExitRefused = cmdutil.ExitPolicyViolation
	// ExitNoStack is Pulumi's ExitStackNotFound: no --stack and none selected.
	ExitNoStack = cmdutil.ExitStackNotFound
	// ExitPending is Pulumi's ExitNoChanges: --expect-no-changes found
	// changes, docs --check found drift.
	ExitPending = cmdutil.ExitNoChanges
	// ExitCancelled is Pulumi's ExitCancelled: an interrupt (SIGINT,
	// SIGTERM, SIGHUP; the first cancels gracefully) or a declined
	// confirmation.
	ExitCancelled = cmdutil.ExitCancelled
)

// ErrNoStack is returned when no stack is given and none is selected.
var ErrNoStack = errors.New("no stack")

// ExitCode is the exit code of a failed command, by the error's type and
// kind, never its text; usage errors the command line found are the
// caller's (it knows their type).
func ExitCode(err error) int {
	var r *Refusal
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrNotConfirmed):
		return ExitCancelled
	case errors.Is(err, ErrNoTerminal):
		return ExitUsage
	case errors.Is(err, ErrNoStack):
		return ExitNoStack
	case errors.As(err, &r):
		return ExitRefused
	case errors.Is(err, ErrPending):
		return ExitPending
	}
	return ExitError
}

// named names the rule of a refusal that names none.
func named(err error, rule string) error {
	var ref *Refusal
	if errors.As(err, &ref) && ref.Rule == "" {
		ref.Rule = rule
	}
	return err
}

// Finding is one refusal a Report rule found, with the rule's name.
type Finding struct {
	gate.Refusal
	// Rule is the rule that found it.
	Rule string `json:"rule"`
}

func (f Finding) String() string { return f.Refusal.String() + " [rule " + f.Rule + "]" }

// judge runs the rules of one stage of the table in order. A Stop,
// Before or Last rule's refusal ends it (named after the rule); Report
// rules' refusals are collected.
func judge(o *Op, rules []Rule, stages ...Stage) ([]Finding, error) {
	var out []Finding
	for _, r := range rules {
		if !slices.Contains(stages, r.Stage) {
			continue
		}
		found, err := r.Check(o)
		if err != nil {
			return nil, named(err, r.Name)
		}
		for _, f := range found {
			out = append(out, Finding{Refusal: f, Rule: r.Name})
		}
	}
	return out, nil
}

// judgeWithin judges the Within rule name of the run's verb's table: the
// verb's plan or apply stage calls it where what the rule judges is known.
func (o *Op) judgeWithin(name string) error {
	i := slices.IndexFunc(o.rules, func(r Rule) bool { return r.Name == name && r.Stage == Within })
	if i < 0 {
		return fmt.Errorf("rule %s: not a Within rule of this verb's table", name)
	}
	_, err := judge(o, o.rules[i:i+1], Within)
	return err
}

// Explain prints every verb's table: each rule's stage, name, and the
// file and function holding it.
func Explain(w io.Writer) {
	for _, v := range Tables() {
		_, _ = fmt.Fprintf(w, "milner %s:\n", v.Name)
		for _, r := range v.Rules {
			_, _ = fmt.Fprintf(w, "  %-25s %-23s %s\n", r.Name, r.Stage, filepath.ToSlash(r.Where()))
		}
	}
}
