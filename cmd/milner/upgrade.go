package main

import (
	"os"
	"os/signal"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/docs"
	"github.com/milner/milner/internal/upgrade"
)

func upgradeCmd() *cobra.Command {
	f := &stackFlags{}
	var talosconfigFile string
	var dryRun, yes bool
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Upgrade Talos, then Kubernetes, to the stack's declared versions, one node at a time (health-gated, resumable)",
		Long: `upgrade reads the declared Talos and Kubernetes versions and the nodes from
Pulumi.<stack>.yaml, asks every node what it runs (Talos machine API), and
plans the nodes whose version differs: control planes first, then workers,
one at a time. Before and after each node the cluster must be healthy
(every node ready, etcd with one healthy voting member per control plane,
no alarm). A node is upgraded with the declared installer image, its data
preserved, and must come back on the declared version. The first failure
stops the run and names the node; a rerun skips nodes already upgraded.
Kubernetes follows with upstream's upgrade-k8s sequence. It touches no
Pulumi state; 'milner up' afterwards plans no change for upgraded nodes.`,
		Example: `  milner upgrade --stack dev --dry-run   # the plan; changes nothing
  milner upgrade --stack dev             # asks for the cluster name, then runs
  milner upgrade --stack dev --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if talosconfigFile == "" {
				var err error
				if talosconfigFile, err = talosconfig.path(""); err != nil {
					return err
				}
			}
			s, err := docs.ReadStack(filepath.Join(projectDir(cmd), "Pulumi."+f.stack+".yaml"))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			c, err := upgrade.Connect(ctx, talosconfigFile, upgrade.FromConfig(s.Config))
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			var declined error
			err = upgrade.Execute(ctx, c, upgrade.DefaultOptions(os.Stdout), dryRun, func(*upgrade.Plan) bool {
				if yes {
					return true
				}
				declined = confirm(os.Stdin, os.Stdout, "Upgrade these nodes, one at a time?", s.Config.Cluster.Name, "--yes")
				return declined == nil
			})
			if declined != nil {
				return declined
			}
			return err
		},
	}
	f.addStack(cmd)
	cmd.Flags().StringVar(&talosconfigFile, "talosconfig", "", "talosconfig file (default $TALOSCONFIG or ~/.talos/config, where `milner talosconfig` merges the stack's)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "run without the typed confirmation")
	return cmd
}
