package appsadopt

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
)

// Stack is what Run needs of the stack (an *engine.Stack).
type Stack interface {
	// Name is the stack name.
	Name() string
	// Lock takes Milner's stack lock: Run writes state, as up does.
	Lock(ctx context.Context) (func(), error)
	// Preview previews the stack's program.
	Preview(ctx context.Context, o engine.PlanOptions) (*engine.Result, *engine.Plan, error)
	// UpTargets runs an up of the program with only urns targeted.
	UpTargets(ctx context.Context, urns []string) (*engine.Result, error)
	// EditState edits the stack's latest checkpoint.
	EditState(ctx context.Context, edit func(*apitype.DeploymentV3) error) error
}

var _ Stack = (*engine.Stack)(nil)

// Options configure Run.
type Options struct {
	// Stack is the stack whose apps layer is adopted.
	Stack Stack
	// Cluster answers for the cluster the stack's apps run on.
	Cluster Cluster
	// ProjectDir is where local charts' paths are read from.
	ProjectDir string
	// SetAdopt sets the import ids the stack's program reads in its next
	// run (stacks.RunOptions.Adopt); Run clears them after the import.
	SetAdopt func(map[string]string)
	// Out is where Run says what it did.
	Out io.Writer
}

// Result is what Run did.
type Result struct {
	// Plan is what it adopted (nil when it refused).
	Plan *Plan
	// Refusals are the objects it refused to adopt; nothing was changed.
	Refusals []gate.Refusal
	// Preview is the preview after the adoption: what the next up does.
	Preview *engine.Result
}

// Run adopts the apps layer: under the stack lock it previews, asks the
// cluster (Decide), imports what the cluster holds in one up that targets
// only the components (each adopted object is imported and kept as read;
// nothing is created, updated or deleted in the cluster), records the
// program's run inputs of each imported release (Complete), and previews
// again. That preview must plan no create of an adopted object, and no
// replace and no delete; a release whose live version or values differ
// from the stack shows as its update.
func Run(ctx context.Context, o Options) (*Result, error) {
	unlock, err := o.Stack.Lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	name := o.Stack.Name()
	before, _, err := o.Stack.Preview(ctx, engine.PlanOptions{})
	if err != nil {
		return nil, err
	}
	declared, err := Declared(before.Steps, o.ProjectDir)
	if err != nil {
		return nil, fmt.Errorf("stack %q: %w", name, err)
	}
	plan, refusals, err := Decide(ctx, declared, o.Cluster)
	if err != nil || len(refusals) > 0 {
		return &Result{Refusals: refusals}, err
	}
	if len(plan.Objects) == 0 {
		_, _ = fmt.Fprintf(o.Out, "milner adopt: the cluster holds none of the %d objects of stack %q's apps layer that its state lacks; nothing to adopt\n", len(declared), name)
		return &Result{Plan: plan, Preview: before}, nil
	}
	o.SetAdopt(plan.Adopt())
	up, err := o.Stack.UpTargets(ctx, components(before.Steps))
	o.SetAdopt(nil)
	if err != nil {
		return nil, fmt.Errorf("stack %q: import the apps layer: %w", name, err)
	}
	var missed []string
	for _, ob := range plan.Objects {
		if !slices.ContainsFunc(up.Steps, func(s gate.Step) bool { return s.URN == ob.URN && s.Op == apitype.OpImport && !s.Failed }) {
			missed = append(missed, ob.Logical())
		}
	}
	if len(missed) > 0 {
		return nil, fmt.Errorf("stack %q: the import run imported none of %v", name, missed)
	}
	imported, _, err := o.Stack.Preview(ctx, engine.PlanOptions{})
	if err != nil {
		return nil, err
	}
	var updates []gate.Step
	for _, s := range imported.Steps {
		if _, ok := plan.Releases[s.URN]; ok && s.Op == apitype.OpUpdate {
			updates = append(updates, s)
		}
	}
	if len(updates) > 0 {
		var completed []string
		if err := o.Stack.EditState(ctx, func(dep *apitype.DeploymentV3) error {
			completed, err = Complete(dep, updates)
			return err
		}); err != nil {
			return nil, fmt.Errorf("stack %q: record the imported releases' run inputs: %w", name, err)
		}
		_, _ = fmt.Fprintf(o.Out, "milner adopt: recorded the program's run inputs (%v) of the imported releases %v\n", "atomic, timeout, chart source, ...", completed)
	}
	after, _, err := o.Stack.Preview(ctx, engine.PlanOptions{})
	if err != nil {
		return nil, err
	}
	if bad := unsafe(after.Steps, plan); len(bad) > 0 {
		return nil, fmt.Errorf("stack %q: after the adoption the preview plans %v (the adopted objects are in state; fix the config or the objects and preview)", name, bad)
	}
	report(o.Out, name, plan, after.Steps)
	return &Result{Plan: plan, Preview: after}, nil
}

// unsafe lists what the preview after an adoption must not plan: a create
// of an adopted object, any replace or delete.
func unsafe(steps []gate.Step, plan *Plan) []string {
	var bad []string
	for _, s := range steps {
		adopted := slices.ContainsFunc(plan.Objects, func(o Object) bool { return o.URN == s.URN })
		switch s.Op {
		case apitype.OpCreate, apitype.OpImport:
			if adopted {
				bad = append(bad, fmt.Sprintf("%s %s", s.Op, s.Name()))
			}
		case apitype.OpReplace, apitype.OpCreateReplacement, apitype.OpDeleteReplaced, apitype.OpDelete, apitype.OpImportReplacement:
			bad = append(bad, fmt.Sprintf("%s %s", s.Op, s.Name()))
		}
	}
	return bad
}

// report says what was adopted and what the next up does with it.
func report(out io.Writer, stack string, plan *Plan, steps []gate.Step) {
	_, _ = fmt.Fprintf(out, "milner adopt: imported %d live objects of stack %q's apps layer into its state:\n", len(plan.Objects), stack)
	for _, o := range plan.Objects {
		op := apitype.OpSame
		var diffs []string
		if i := slices.IndexFunc(steps, func(s gate.Step) bool { return s.URN == o.URN }); i >= 0 {
			op, diffs = steps[i].Op, steps[i].Diffs
		}
		line := "  " + o.String()
		if r := plan.Releases[o.URN]; r != nil {
			line += fmt.Sprintf(": chart %s %s, revision %d %s", r.Chart, r.Version, r.Revision, r.Status)
		}
		if op == apitype.OpSame {
			line += "; the next up leaves it as it is"
		} else {
			line += fmt.Sprintf("; the next up plans %s %v (the stack differs from the cluster)", op, diffs)
		}
		_, _ = fmt.Fprintln(out, line)
	}
}
