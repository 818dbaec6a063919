package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/internal/stackfile"
)

// stackFlags are the flags of every verb that opens a stack.
type stackFlags struct {
	stack string
	json  bool
	yes   bool
	// program overrides stacks.Program (up sets per-run options on it).
	program pulumi.RunFunc
}

// addStack declares --stack, completed from Pulumi.*.yaml, and --json
// (every verb on a stack prints its result with emit). Without --stack the
// verb works on the current stack (name), unless explicit: a verb that
// destroys or overwrites (teardown, state restore, secrets import,
// upgrade, etcd restore) never falls back to it, so the stack it changes is always typed.
func (f *stackFlags) addStack(cmd *cobra.Command, explicit bool) {
	usage := "stack name; its config is Pulumi.<stack>.yaml (default: the stack 'pulumi stack select' chose)"
	if explicit {
		usage = "stack name; its config is Pulumi.<stack>.yaml (required: this verb destroys or overwrites)"
	}
	cmd.Flags().StringVarP(&f.stack, "stack", "s", "", usage)
	f.addJSON(cmd)
	if explicit {
		_ = cmd.MarkFlagRequired("stack")
	}
	_ = cmd.RegisterFlagCompletionFunc("stack", completeStacks)
}

// name is --stack, else the current stack of the project's backend
// (engine.CurrentStack: what 'pulumi stack select' chose, or PULUMI_STACK).
func (f *stackFlags) name(cmd *cobra.Command) (string, error) {
	if f.stack != "" {
		return f.stack, nil
	}
	name, err := engine.CurrentStack(cmd.Context(), projectDir(cmd))
	if errors.Is(err, engine.ErrNoCurrentStack) {
		return "", fmt.Errorf("%w: give --stack <name>, or select one with 'pulumi stack select <name>'", pipeline.ErrNoStack)
	}
	if err != nil {
		return "", err
	}
	f.stack = name
	return name, nil
}

// addYes declares -y/--yes, which skips the typed confirmation.
func (f *stackFlags) addYes(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "skip the confirmation (typing the stack name); needed without a terminal")
}

// jsonUsage is --json's usage wherever it is declared: what stdout holds
// under it, on success and on failure (failure).
const jsonUsage = "print the result as one JSON document on stdout (text and Pulumi's progress go to stderr); a run that fails before its result prints {error, rule, exitCode} instead"

// addJSON declares --json.
func (f *stackFlags) addJSON(cmd *cobra.Command) { addJSON(cmd, &f.json) }

// addJSON declares --json on a verb without a stack.
func addJSON(cmd *cobra.Command, asJSON *bool) {
	cmd.Flags().BoolVar(asJSON, "json", false, jsonUsage)
}

// emitted says that the running verb printed its result (emit): run then
// prints no failure document.
var emitted bool

// emit is every verb's one printer of its result: v as indented JSON on
// stdout under --json, else text (nil: the text is printed already); then
// it returns err (a refusal or failure after the result: the document is
// the result, the error goes to stderr and the exit code says it).
func emit(asJSON bool, v any, text func(), err error) error {
	switch {
	case asJSON:
		emitted = true
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(v); jerr != nil {
			return jerr
		}
	case text != nil:
		text()
	}
	return err
}

// failure is what --json prints on stdout when a verb fails before
// printing its result (a usage error, a refusal before the plan, an
// engine error): the error as stderr says it, the rule of a refusal, and
// the exit code.
type failure struct {
	Error    string `json:"error"`
	Rule     string `json:"rule,omitempty"`
	ExitCode int    `json:"exitCode"`
}

// gated runs a gated verb through the pipeline and prints its outcome; a
// run with nothing to do prints the stack's empty outcome.
func (f *stackFlags) gated(o *pipeline.Op, v pipeline.Verb, in pipeline.Input) error {
	in.JSON = f.json
	g, err := pipeline.Run(o, v, in)
	switch {
	case g == nil && err != nil:
		return err
	case g == nil:
		g = &pipeline.Outcome{Stack: o.St.Name()}
	}
	return emit(f.json, g, nil, err)
}

// projectDir is the -C/--cwd of the command line.
func projectDir(cmd *cobra.Command) string {
	dir, _ := cmd.Root().PersistentFlags().GetString("cwd")
	return dir
}

// run is the RunE of a verb on one stack: it opens the stack, under
// Milner's own lock (engine.Stack.Lock) when locked, for an operation that
// changes it, and runs do on it. Another milner holding the lock is a
// refusal: nothing was changed, and the command says so at once instead
// of waiting.
func (f *stackFlags) run(locked bool, do func(*pipeline.Op) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		name, err := f.name(cmd)
		if err != nil {
			return err
		}
		o := &pipeline.Op{Ctx: cmd.Context(), Yes: f.yes, Out: os.Stdout, Args: args}
		if f.json {
			o.Out = os.Stderr
		}
		opts := engine.Options{Stack: name, Dir: projectDir(cmd), Progress: o.Out, Program: f.program, Interrupts: interruptsOf(o.Ctx), Command: cmd.CommandPath(), Display: global.display}
		if o.St, err = engine.Open(o.Ctx, opts); err != nil {
			return err
		}
		if locked {
			unlock, err := o.St.Lock(o.Ctx)
			if errors.Is(err, engine.ErrLocked) {
				return refused("%v: another milner is changing this stack; nothing was changed, run it again when that one has finished", err)
			}
			if err != nil {
				return err
			}
			defer unlock()
		}
		return do(o)
	}
}

// completeStacks completes stack names from the Pulumi.<stack>.yaml files.
func completeStacks(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	files, err := stackfile.Files(projectDir(cmd))
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, f := range files {
		names = append(names, stackfile.Name(f))
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completeNodes completes node names from the --stack's stack file.
func completeNodes(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	stack, _ := cmd.Flags().GetString("stack")
	if stack == "" {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	s, err := stackfile.Read(stackfile.Path(projectDir(cmd), stack), nil)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, n := range s.Config.Nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names, cobra.ShellCompDirectiveNoFileComp
}
