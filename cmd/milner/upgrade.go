package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks"
)

func upgradeCmd() *cobra.Command {
	f := &stackFlags{}
	var talosconfigFile string
	var dryRun bool
	// The record's update runs the cluster health check (the default
	// RunOptions): it changes the Talos layer.
	f.program = stacks.NewProgram(&stacks.RunOptions{})
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Upgrade Talos, then Kubernetes, to the stack's declared versions, one node at a time (health-gated, resumable), then record the nodes' configs",
		Long: `upgrade reads the declared Talos and Kubernetes versions and the nodes from
Pulumi.<stack>.yaml, asks every node what it runs (Talos machine API), and
plans the nodes whose version differs: control planes first, then workers,
one at a time. Before and after each node the cluster must be healthy
(every node ready, etcd with one healthy voting member per control plane,
no alarm), and every StatefulSet and Deployment of the apps layer must be
fully Ready: after a node, up to 10 minutes (a rebooted node's Vault pod
is Ready only once unsealed; the run stops, naming the sealed pod, rather
than take the next node down). A node is upgraded with the declared installer image, its data
preserved, and must come back on the declared version. The first failure
stops the run and names the node; a rerun skips nodes already upgraded.
Kubernetes follows with upstream's upgrade-k8s sequence.

Then it records: a gated 'milner up' whose delta may only update the nodes'
Talos machine configs, which Talos finds already in place (upgrade-k8s
wrote the images) but for the installer reference, applied live. After
it, 'milner up' plans no change for the upgraded nodes. Anything else
pending in the stack is left to 'milner up'. The whole run holds the
stack's lock, so no 'milner up' pushes a config while nodes move.`,
		Example: `  milner upgrade --stack dev --dry-run   # the plan; changes nothing
  milner upgrade --stack dev             # asks you to type the stack name, then runs
  milner upgrade --stack dev --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			// A dry run sends nothing, so takes no lock and needs no gate.
			return f.run(!dryRun, func(o *op) error { return runUpgrade(o, talosconfigFile, dryRun) })(cmd, args)
		},
	}
	f.addStack(cmd, true)
	cmd.Flags().StringVar(&talosconfigFile, "talosconfig", "", "talosconfig file (default: the stack state's, else $TALOSCONFIG or ~/.talos/config)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	f.addYes(cmd)
	return cmd
}

// runUpgrade moves the nodes to the declared versions, then records their configs.
func runUpgrade(o *op, talosconfigFile string, dryRun bool) error {
	cfg, err := o.config()
	if err != nil {
		return err
	}
	tc, err := nodesTalosconfig(o, talosconfigFile, false)
	if err != nil {
		return fmt.Errorf("%w (`milner up` writes it to the state; or pass --talosconfig)", err)
	}
	c, err := upgrade.Connect(o.ctx, tc, upgrade.FromConfig(cfg))
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	opts := upgrade.DefaultOptions(os.Stdout)
	if !dryRun { // a dry run sends nothing, so needs no gate
		if opts.Apps, err = appsOf(o, true); err != nil {
			return err
		}
	}
	var declined error
	err = upgrade.Execute(o.ctx, c, opts, dryRun, func(*upgrade.Plan) bool {
		if !o.f.yes {
			fmt.Println("then: record the nodes' Talos configs in the state (a gated up of those configs only)")
		}
		declined = o.confirm("Upgrade these nodes, one at a time?")
		return declined == nil
	})
	var stopped *upgrade.StopError
	switch {
	case declined != nil:
		return declined
	case errors.As(err, &stopped) && stopped.NothingChanged():
		return refused("%v", err)
	case err != nil:
		return err
	case dryRun:
		fmt.Println("then: `milner upgrade` records the nodes' Talos configs in the state (a gated up of those configs only)")
		return nil
	}
	return recordConfigs(o, talosconfigFile)
}

// appsOf is the apps layer's readiness gate (upgrade.Apps), asked with the
// stack's kubeconfig output; nil when the stack declares no apps, or, unless
// required, when the state holds no kubeconfig (no cluster ran yet).
func appsOf(o *op, required bool) (*upgrade.Apps, error) {
	cfg := o.cfg
	if len(cfg.Apps) == 0 && !cfg.Storage.On() {
		return nil, nil
	}
	outs, err := o.outputs()
	if err != nil {
		return nil, err
	}
	raw, _ := outs[kubeconfig.output].(string)
	switch {
	case raw == "" && !required:
		return nil, nil
	case raw == "":
		return nil, fmt.Errorf("stack %q has no kubeconfig output: the apps gate between nodes needs it (run `milner up` through the Talos layer first)", o.st.Name())
	}
	apps, err := upgrade.NewApps(cfg, []byte(raw))
	if err != nil {
		return nil, fmt.Errorf("stack %q: %w", o.st.Name(), err)
	}
	return apps, nil
}

// recordConfigs makes the stack's state match what the nodes hold once
// they run the declared versions: a gated up (the preview, layer rules and
// version interlock of `milner up`) whose delta may update the nodes'
// Talos machine configs and nothing else. Anything else pending is left,
// said, to `milner up`.
func recordConfigs(o *op, talosconfigFile string) error {
	fmt.Println("\nrecord: the nodes' Talos configs in the state")
	gf := &gatedFlags{stackFlags: *o.f, talosconfig: talosconfigFile}
	g, plan, err := previewGated(o, gf)
	if err != nil {
		return err
	}
	if err := g.verdict(gf); err != nil {
		return err
	}
	if g.Report.Empty() {
		fmt.Println("record: the state already matches; `milner up` plans no change")
		return nil
	}
	if other := notConfigUpdates(g.Report); len(other) > 0 {
		fmt.Printf("record: skipped: the stack has other changes pending (%s); review them with `milner preview`, then `milner up` records the Talos configs with them\n", strings.Join(other, ", "))
		return nil
	}
	if err := o.confirm("Record these Talos configs (the nodes already hold them but for the installer reference, applied live)?"); err != nil {
		return err
	}
	if _, err := o.st.UpPlan(o.ctx, plan); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	fmt.Println("record: done; `milner up` plans no change for the upgraded nodes")
	return nil
}

// notConfigUpdates lists the changes of a report other than in-place
// updates of a node's Talos machine config.
func notConfigUpdates(r gate.Report) []string {
	var out []string
	for _, d := range r.Deltas {
		for _, cs := range [][]gate.Change{d.Creates, d.Replaces, d.Deletes, d.Imports} {
			for _, c := range cs {
				out = append(out, c.Name)
			}
		}
		for _, c := range d.Updates {
			if c.Type != gate.TypeConfigApply {
				out = append(out, c.Name)
			}
		}
	}
	return out
}
