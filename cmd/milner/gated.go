package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/stacks"
)

// gatedFlags are the flags of preview and up.
type gatedFlags struct {
	stackFlags
	replace         []string
	remove          string
	drainTimeout    time.Duration // up only: --drain-timeout
	refresh         bool
	expectNoChanges bool
	talosconfig     string
	osDisk          bool // up only: --os-disk
	allowContract   bool // up only: --allow-contract-change
	acceptRecreated []string
	// runOpts are the program's per-run options, which the pipeline sets
	// between the checks and the preview (the apply modes) and before the
	// update (the health check).
	runOpts *stacks.RunOptions
}

func (f *gatedFlags) add(cmd *cobra.Command) {
	f.addStack(cmd, false)
	cmd.Flags().StringArrayVar(&f.replace, "replace", nil, "recreate this node's VM (repeatable); the replaced VMs must be exactly the named ones")
	_ = cmd.RegisterFlagCompletionFunc("replace", completeNodes)
	cmd.Flags().StringVar(&f.remove, "remove", "", "take this node, already gone from milner:nodes, out of the cluster: drain it, remove its etcd member, shut it down, delete its VM; its volumes stay on the host (docs/runbooks/remove-node.md)")
	cmd.Flags().BoolVar(&f.expectNoChanges, "expect-no-changes", false, fmt.Sprintf("exit %d if the stack has any change (a CI drift check); up then applies nothing", pipeline.ExitPending))
	cmd.Flags().StringArrayVar(&f.acceptRecreated, "accept-recreated", nil, "record this volume's file (its logical name, repeatable), found recreated at its path, as the volume instead of refusing it")
	cmd.Flags().StringVar(&f.talosconfig, "talosconfig", "", "talosconfig the nodes are asked their versions with (default: the stack state's, else $TALOSCONFIG or ~/.talos/config)")
}

// input is what the flags ask of the pipeline.
func (f *gatedFlags) input() pipeline.Input {
	return pipeline.Input{Replace: f.replace, Remove: f.remove, DrainTimeout: f.drainTimeout, Refresh: f.refresh, ExpectNoChanges: f.expectNoChanges, OSDisk: f.osDisk,
		AllowContract: f.allowContract, AcceptRecreated: f.acceptRecreated, Talosconfig: f.talosconfig, RunOpts: f.runOpts}
}

// newGatedFlags are a gated verb's flags, with the program of its run options.
func newGatedFlags() *gatedFlags {
	f := &gatedFlags{runOpts: &stacks.RunOptions{}}
	f.program = stacks.NewProgram(f.runOpts)
	return f
}

func previewCmd() *cobra.Command {
	f := newGatedFlags()
	var explain bool
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
declared is refused: 'milner upgrade' moves versions.

Every refusal names its rule ([rule <name>]); --explain lists each gated
verb's rules with the file and function that hold them.`,
		Example: `  milner preview --stack dev
  milner preview --stack dev --replace cp-2        # what replacing cp-2's VM would do
  milner preview --stack dev --remove w-2          # what removing w-2 (gone from milner:nodes) would do
  milner preview --stack prod --expect-no-changes  # CI drift check: exit 7 on any change
  milner preview --stack dev --json | jq .report
  milner preview --stack dev --json | jq .pulumi.steps   # Pulumi's own preview digest
  milner preview --explain                         # where each refusal comes from`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if explain {
				pipeline.Explain(os.Stdout)
				return nil
			}
			return f.run(false, func(o *pipeline.Op) error { return f.gated(o, pipeline.Preview(), f.input()) })(cmd, args)
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&f.refresh, "refresh", false, "read every resource back from its provider first")
	cmd.Flags().BoolVar(&explain, "explain", false, "list every gated verb's rules, each with the file and function holding it, and change nothing")
	return cmd
}
