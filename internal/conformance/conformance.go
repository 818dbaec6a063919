// Package conformance evaluates the layer rules of the seeds on what a stack
// asks the engine for: the program runs under the recording mock
// (internal/offline) and each Rule reads its registrations and invokes. The
// figure `conformance <stack>: N/M` counts the rules that hold among those
// that apply to the layers the stack declares.
package conformance

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
)

// Evidence is what the rules read: the stack's config and the program's
// runs under the mock.
type Evidence struct {
	// Config is the stack's typed config.
	Config *config.Config
	// Declared is the run of the program as configured.
	Declared Run
	// Bumped is a second run with the Talos version bumped
	// (cluster.talosVersion, next patch release); empty for a stack that
	// starts at the apps layer.
	Bumped Run
	// Tools is the directory of the Talos config validators
	// (talos-validate-<machinery version>): <project>/.tools/bin.
	Tools string
}

// Run is one run of the program under the mock.
type Run struct {
	// TalosVersion is the Talos version the run declared ("" as configured).
	TalosVersion string
	// Regs are its registrations.
	Regs []offline.Registration
	// Invokes are the provider functions it called.
	Invokes []offline.Invoke
}

// Collect runs the program twice for one stack under the mock: as
// configured, and with the Talos version bumped.
func Collect(s *stackfile.Stack) (*Evidence, error) {
	rec, err := offline.Run(stacks.Program, s.Name, s.Raw, s.SecretKeys...)
	if err != nil {
		return nil, fmt.Errorf("conformance %s: run: %w", s.Name, err)
	}
	ev := &Evidence{Config: s.Config, Declared: Run{Regs: rec.Registrations(), Invokes: rec.Invokes()}}
	if s.Config.StartAt == config.LayerApps {
		// An existing cluster: no Talos version to bump, no substrate to check.
		return ev, nil
	}
	bumpedRaw, version, err := bumpTalos(s.Raw)
	if err != nil {
		return nil, fmt.Errorf("conformance %s: %w", s.Name, err)
	}
	bumped, err := offline.Run(stacks.Program, s.Name, bumpedRaw, s.SecretKeys...)
	if err != nil {
		return nil, fmt.Errorf("conformance %s: run with Talos %s: %w", s.Name, version, err)
	}
	ev.Bumped = Run{TalosVersion: version, Regs: bumped.Registrations(), Invokes: bumped.Invokes()}
	return ev, nil
}

// bumpTalos returns a copy of raw with milner:cluster.talosVersion raised to
// the next patch release, and that version.
func bumpTalos(raw map[string]string) (map[string]string, string, error) {
	k := config.Namespace + ":cluster"
	var cluster map[string]any
	if err := json.Unmarshal([]byte(raw[k]), &cluster); err != nil {
		return nil, "", fmt.Errorf("bump talosVersion: %s: %w", k, err)
	}
	v, _ := cluster["talosVersion"].(string)
	next, err := config.NextPatch(v)
	if err != nil {
		return nil, "", fmt.Errorf("bump talosVersion: %w", err)
	}
	cluster["talosVersion"] = next
	b, err := json.Marshal(cluster)
	if err != nil {
		return nil, "", err
	}
	out := maps.Clone(raw)
	out[k] = string(b)
	return out, next, nil
}

// Result is one rule's verdict on one stack.
type Result struct {
	// Rule is the rule's name.
	Rule string `json:"rule"`
	// Applies is false when the stack declares none of the rule's layer.
	Applies bool `json:"applies"`
	// Problems are the violations; none means the rule holds.
	Problems []string `json:"problems"`
	// Unchecked names the missing tools that kept the rule from being
	// checked (none: it was checked).
	Unchecked []string `json:"unchecked,omitempty"`
}

// Figure is the conformance of one stack.
type Figure struct {
	// Stack is the stack name.
	Stack string `json:"stack"`
	// Results holds one result per rule, in Rules order.
	Results []Result `json:"results"`
}

// Evaluate applies every rule to the evidence of one stack.
func Evaluate(stack string, ev *Evidence) Figure {
	f := Figure{Stack: stack}
	for _, r := range Rules {
		res := Result{Rule: r.Name, Applies: ev.Config.Declares(r.Layer)}
		if res.Applies && r.Needs != nil {
			res.Unchecked = r.Needs(ev)
		}
		if res.Applies && len(res.Unchecked) == 0 {
			res.Problems = r.Check(ev)
		}
		f.Results = append(f.Results, res)
	}
	return f
}

// Score returns the rules that hold and the rules that apply and were
// checked.
func (f Figure) Score() (passed, applicable int) {
	for _, r := range f.Results {
		if !r.Applies || len(r.Unchecked) > 0 {
			continue
		}
		applicable++
		if len(r.Problems) == 0 {
			passed++
		}
	}
	return passed, applicable
}

// OK reports whether every applicable rule that was checked holds.
func (f Figure) OK() bool {
	p, a := f.Score()
	return p == a
}

// Unchecked names the tools missing for rules that apply, each once.
func (f Figure) Unchecked() []string {
	var out []string
	for _, r := range f.Results {
		for _, t := range r.Unchecked {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// String is the figure's report: `conformance <stack>: N/M`, then each
// failing rule with its problems and each rule that does not apply.
func (f Figure) String() string {
	var b strings.Builder
	p, a := f.Score()
	fmt.Fprintf(&b, "conformance %s: %d/%d", f.Stack, p, a)
	if u := f.Unchecked(); len(u) > 0 {
		fmt.Fprintf(&b, " (not checked: %s not built)", strings.Join(u, ", "))
	}
	fmt.Fprintln(&b)
	for _, r := range f.Results {
		switch {
		case !r.Applies:
			fmt.Fprintf(&b, "  n/a   %s (layer not declared)\n", r.Rule)
		case len(r.Unchecked) > 0:
			fmt.Fprintf(&b, "  SKIP  %s: needs %s, not built (scripts/tools.sh talos-validate)\n", r.Rule, strings.Join(r.Unchecked, ", "))
		case len(r.Problems) > 0:
			fmt.Fprintf(&b, "  FAIL  %s\n", r.Rule)
			for _, pr := range r.Problems {
				fmt.Fprintf(&b, "          - %s\n", pr)
			}
		}
	}
	return b.String()
}
