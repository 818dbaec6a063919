package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/pipeline"
)

func teardownCmd() *cobra.Command {
	f := &stackFlags{}
	var confirmName string
	cmd := &cobra.Command{
		Use:   "teardown",
		Short: "Remove the WHOLE stack, protected disks and data included, after typing the stack name",
		Long: `teardown is the only path that removes protected resources, and it is a full
teardown, never a recovery tool: a node is recovered with
'milner up --replace <node>'. It lists everything, asks you to type the
stack name, unprotects and destroys the whole stack, and removes the cluster's
contexts from the kubeconfig and talosconfig that 'milner kubeconfig' and
'milner talosconfig' wrote. If the destroy fails, what it had unprotected
and not yet deleted is protected again.`,
		Example: `  milner teardown --stack dev
  milner teardown --stack dev --yes   # scripts`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("teardown takes no target (got %v): it removes the whole stack or nothing; to recover one node use `milner up --replace <node>`", args)}
			}
			return nil
		},
		RunE: f.run(true, func(o *pipeline.Op) error {
			return f.gated(o, pipeline.Teardown(), pipeline.Input{ConfirmName: confirmName})
		}),
	}
	f.addStack(cmd, true)
	f.addYes(cmd)
	cmd.Flags().StringVar(&confirmName, "confirm", "", "the cluster name (milner:cluster.name), for scripts instead of typing the stack name")
	_ = cmd.Flags().MarkDeprecated("confirm", "use --yes (with --stack)")
	return cmd
}
