package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/stacks"
)

func upgradeCmd() *cobra.Command {
	f := &stackFlags{}
	var talosconfigFile string
	var dryRun bool
	var drainTimeout time.Duration
	// The record's update runs the cluster health check (the default
	// RunOptions): it changes the Talos layer.
	run := &stacks.RunOptions{}
	f.program = stacks.NewProgram(run)
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
preserved, and must come back on the declared version (a node on v1.13
or later is drained by milner first, PodDisruptionBudgets holding, and
uncordoned once back; an older one is drained by Talos itself). The first
failure
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
			return f.run(!dryRun, func(o *pipeline.Op) error {
				return f.gated(o, pipeline.Upgrade(), pipeline.Input{Talosconfig: talosconfigFile, DryRun: dryRun, DrainTimeout: drainTimeout, RunOpts: run})
			})(cmd, args)
		},
	}
	f.addStack(cmd, true)
	cmd.Flags().StringVar(&talosconfigFile, "talosconfig", "", "talosconfig file (default: the stack state's, else $TALOSCONFIG or ~/.talos/config)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	cmd.Flags().DurationVar(&drainTimeout, "drain-timeout", 0, "how long the drain of a node on Talos v1.13 or later may wait on its pods' evictions (PodDisruptionBudgets); default 5m, as talosctl's")
	f.addYes(cmd)
	return cmd
}
