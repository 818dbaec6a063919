package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func upCmd() *cobra.Command {
	f := &gatedFlags{}
	var yes bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Preview, refuse what the layer rules forbid, confirm, then apply exactly the previewed delta",
		Long: `up refuses, before touching anything, live substrate objects missing from
the state (empty state, orphans: it prints the adopt commands), then
previews and refuses any delta the layer rules forbid: a replace or delete
of persistent substrate, a replace of anything but a named node VM, the
delete of a Helm release or of the cluster secrets. After a typed "yes"
(or --yes) it applies the preview's own plan: the engine fails any step
the preview did not show rather than take it.`,
		Example: `  milner up --stack dev
  milner up --stack dev --replace cp-2   # recovery: recreate cp-2's VM only; its disks stay
  milner up --stack dev --yes            # scripts: no prompt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop, st, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer stop()
			out := os.Stdout
			if f.json {
				out = os.Stderr
			}
			g, plan, err := previewGated(ctx, f, st, out)
			if err != nil {
				return err
			}
			finish := func(err error) error {
				if f.json {
					if jerr := writeJSON(os.Stdout, g); jerr != nil {
						return jerr
					}
				}
				return err
			}
			if err := g.verdict(f); err != nil || g.Report.Empty() {
				return finish(err)
			}
			if !yes {
				if err := confirm(os.Stdin, out, fmt.Sprintf("Apply exactly this delta to stack %q?", st.Name()), "yes", "--yes"); err != nil {
					return finish(err)
				}
			}
			if _, err := st.UpPlan(ctx, plan); err != nil {
				return finish(err)
			}
			g.Applied = true
			return finish(nil)
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "apply without the typed confirmation")
	return cmd
}
