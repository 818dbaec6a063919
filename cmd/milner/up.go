package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/pipeline"
)

func upCmd() *cobra.Command {
	f := newGatedFlags()
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Preview, refuse what the layer rules forbid, confirm, then apply exactly the previewed delta",
		Long: `up refuses, before touching anything, live substrate objects missing from
the state (empty state, orphans: it prints the adopt commands), then
previews and refuses any delta the layer rules forbid: a replace or delete
of persistent substrate, a replace of anything but a named node VM, the
delete of a Helm release or of the cluster secrets, an update of a node's
Talos config while a node runs other versions than declared (Talos would
apply new Kubernetes images to every node at once: run 'milner upgrade').
After you type the stack name
(or --yes) it applies the preview's own plan: the engine fails any step
the preview did not show rather than take it. Each node named with
--replace is first asked to shut down through the Talos API (Talos
cordons and drains it) and its VM given a bounded time to stop; a node
that does not answer is reported and replaced anyway. On a running
cluster --replace takes one node per run: first every app Pod on the
other nodes must be Ready (a sealed Vault peer refuses the replace), and
the run ends only once the apps are Ready again (up to 10 minutes).
--remove <node> takes a node already gone from milner:nodes out of the
cluster: drained (PodDisruptionBudgets hold; a refused eviction stops the
run, naming the pod), its etcd member removed if quorum allows, shut down
(never reset), its VM deleted; its volumes leave the state and stay on the
host, listed with the command that deletes them.`,
		Example: `  milner up --stack dev
  milner up --stack dev --replace cp-2   # recovery: recreate cp-2's VM only; its disks stay
  milner up --stack dev --replace cp-2 --os-disk   # cp-2's OS disk is lost: fresh OS volume, data volume kept
  milner up --stack dev --remove w-2     # w-2 is gone from milner:nodes: drain, shut down, delete its VM; volumes kept
  milner up --stack dev --yes            # scripts: no prompt`,
		RunE: f.run(true, func(o *pipeline.Op) error {
			switch {
			case len(f.replace) == 0 && f.osDisk:
				return usageError{errors.New("--os-disk needs --replace <node>")}
			case f.drainTimeout != 0 && f.remove == "":
				return usageError{errors.New("--drain-timeout needs --remove <node>")}
			case f.osDisk && len(f.replace) != 1:
				return usageError{fmt.Errorf("--os-disk recovers one node at a time (got --replace %v)", f.replace)}
			}
			return f.gated(o, pipeline.Up(), f.input())
		}),
	}
	f.add(cmd)
	f.addYes(cmd)
	cmd.Flags().BoolVar(&f.osDisk, "os-disk", false, "with --replace <node>: the node's OS disk is lost; remove its etcd member, replace its VM and OS volume (never the data volume), re-apply its config, wait for it to rejoin (docs/runbooks/lost-os-disk.md)")
	cmd.Flags().DurationVar(&f.drainTimeout, "drain-timeout", 0, "with --remove: how long the node's drain may wait on its pods' evictions (PodDisruptionBudgets); default 5m, as talosctl's")
	cmd.Flags().BoolVar(&f.allowContract, "allow-contract-change", false, "apply a change of milner:cluster.configContract (changes every node's config defaults)")
	return cmd
}
