package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/stacks"
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
	allowContract := fs.Bool("allow-contract-change", false, "apply a change of milner:cluster.configContract (changes every node's config defaults)")
	if err := parseFlags(fs, args, "stack"); err != nil {
		return err
	}
	// Decided from the gated preview below, read when the update runs.
	run := &stacks.RunOptions{}
	eo.Program = stacks.NewProgram(run)
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
	resources, err := st.Resources(ctx)
	if err != nil {
		return err
	}
	if refusals := gate.CheckContract(recordedContract(resources), declaredContract(st.Config()), *allowContract); len(refusals) > 0 {
		return fmt.Errorf("refused before touching anything: %s", refusals[0])
	}
	if len(replace) > 0 {
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
	report := gate.NewReport(gate.StepsFromEvents(preview.Events), cluster)
	report.Write(os.Stdout)
	if refusals := gate.Check(report, replace); len(refusals) > 0 {
		fmt.Fprintf(os.Stderr, "milner up: refused before touching anything (%d problems):\n", len(refusals))
		for _, r := range refusals {
			fmt.Fprintf(os.Stderr, "  - %s\n", r)
		}
		return fmt.Errorf("refused: the preview breaks %d layer rules; nothing was applied", len(refusals))
	}
	if report.Empty() {
		fmt.Printf("milner up: stack %q has no changes\n", eo.Stack)
		return nil
	}
	if !*yes && !confirm(os.Stdin, os.Stdout, eo.Stack) {
		return errors.New("refused: not confirmed; nothing was applied")
	}
	// The cluster health check runs only when the Talos layer changes
	// beyond the replaced nodes: a dead node never blocks its own recovery.
	run.SkipHealthCheck = !report.TalosChanged(replace)
	result, err := st.UpPlan(ctx, plan)
	if err != nil {
		return err
	}
	if staged := gate.Staged(gate.AppliedModes(result.Events)); len(staged) > 0 {
		fmt.Printf("milner up: Talos config staged, pending a reboot of: %s (reboot them one at a time)\n", strings.Join(staged, ", "))
	}
	return writeClientFiles(ctx, st, *eo)
}

// recordedContract is the config contract the cluster's secrets bundle was
// created with (its talosVersion input in state); "" before the cluster exists.
func recordedContract(resources []engine.Resource) string {
	for _, r := range resources {
		if r.Type == gate.TypeTalosSecrets {
			v, _ := r.Inputs["talosVersion"].(string)
			return v
		}
	}
	return ""
}

// declaredContract is milner:cluster.configContract of the stack's config.
func declaredContract(cfg map[string]string) string {
	var cl stacks.ClusterConfig
	_ = json.Unmarshal([]byte(cfg["milner:cluster"]), &cl)
	return cl.ConfigContract
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
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			return err
		}
		fmt.Printf("milner up: wrote %s\n", path)
	}
	return nil
}
