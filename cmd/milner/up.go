package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
)

func init() {
	register("up", "preview, refuse what the layer rules forbid, confirm, then apply exactly the previewed delta", runUp)
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// runUp is `milner up --stack <name> [--replace <node>]... [--yes]`.
//
// Before touching anything it refuses live substrate objects missing from
// state (empty state, orphans), then previews and refuses any delta the
// layer rules forbid. After a typed confirmation (or --yes) it applies the
// preview's saved update plan, so the engine itself refuses to do anything
// the preview did not show.
func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	eo := engineFlags(fs)
	var replace stringList
	fs.Var(&replace, "replace", "recreate this node's VM (repeatable); the replaced VMs must be exactly the named ones")
	yes := fs.Bool("yes", false, "apply without the typed confirmation")
	if err := parseFlags(fs, args, "stack"); err != nil {
		return err
	}
	ctx, stop, st, err := openStack(eo)
	if err != nil {
		return err
	}
	defer stop()
	if err := guardSubstrate(ctx, st); err != nil {
		return err
	}

	cluster := clusterName(st.Config())
	plan := engine.PlanOptions{}
	if len(replace) > 0 {
		resources, err := st.Resources(ctx)
		if err != nil {
			return err
		}
		if plan.Replace, err = replaceTargets(resources, cluster, replace); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp("", "milner-plan-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	plan.PlanFile = filepath.Join(dir, "plan.json")

	preview, err := st.PreviewPlan(ctx, plan)
	if err != nil {
		return err
	}
	steps := gate.StepsFromEvents(preview.Events)
	report := gate.NewReport(steps, cluster)
	report.Write(os.Stdout)
	secretsRefusals, err := secretsBundleRefusals(ctx, st, steps)
	if err != nil {
		return err
	}
	if refusals := append(gate.Check(report, replace), secretsRefusals...); len(refusals) > 0 {
		fmt.Fprintf(os.Stderr, "milner up: refused before touching anything (%d problems):\n", len(refusals))
		for _, r := range refusals {
			fmt.Fprintf(os.Stderr, "  - %s\n", r)
		}
		return fmt.Errorf("refused: the preview breaks %d layer rules; nothing was applied", len(refusals))
	}
	if err := verifyBootImage(st.Config(), report); err != nil {
		return err
	}
	if report.Empty() {
		fmt.Printf("milner up: stack %q has no changes\n", eo.Stack)
		return nil
	}
	if !*yes && !confirm(os.Stdin, os.Stdout, eo.Stack) {
		return errors.New("refused: not confirmed; nothing was applied")
	}
	if _, err := st.UpPlan(ctx, plan); err != nil {
		return err
	}
	return writeClientFiles(ctx, st, *eo)
}

// writeClientFiles writes the stack's kubeconfig and talosconfig outputs,
// when it has them, to the files teardown removes (mode 0600: they are
// credentials; the state directory is git-ignored).
func writeClientFiles(ctx context.Context, st *engine.Stack, eo engine.Options) error {
	outs, err := st.Outputs(ctx)
	if err != nil {
		return err
	}
	for i, output := range []string{"kubeconfig", "talosconfig"} {
		v, ok := outs[output].(string)
		if !ok {
			return nil
		}
		path := clientFiles(eo)[i]
		if err := engine.PrivateDir(filepath.Dir(path)); err != nil {
			return err
		}
		if err := engine.WritePrivateFile(path, []byte(v)); err != nil {
			return err
		}
		fmt.Printf("milner up: wrote %s\n", path)
	}
	return nil
}
