package main

import (
	"github.com/spf13/cobra"
)

func previewCmd() *cobra.Command {
	f := &gatedFlags{}
	cmd := &cobra.Command{
		Use:   "preview",
		Short: "Show the delta `up` would apply, by layer, and what the layer rules refuse",
		Long: `preview runs the program on the engine without changing anything and prints
the delta grouped by layer (persistent substrate, node VMs, Talos, apps),
the nodes whose Talos change may stage a reboot, each node's declared
against running Talos and Kubernetes versions (asked through the Talos API
with the state's talosconfig; one line when they cannot be asked), and
every rule the delta breaks: exactly what 'milner up' would print before
asking. A Talos config update while a node runs other versions than
declared is refused: 'milner upgrade' moves versions.`,
		Example: `  milner preview --stack dev
  milner preview --stack dev --replace cp-2        # what replacing cp-2's VM would do
  milner preview --stack prod --expect-no-changes  # CI drift check: exit 4 on any change
  milner preview --stack dev --json | jq .report`,
		RunE: f.run(false, func(o *op) error {
			g, _, err := previewGated(o, f)
			if err != nil {
				return err
			}
			return emit(f.json, g, g.verdict(f))
		}),
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&f.refresh, "refresh", false, "read every resource back from its provider first")
	return cmd
}
