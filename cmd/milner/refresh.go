package main

import (
	"fmt"
	"github.com/milner/milner/internal/pipeline"

	"github.com/spf13/cobra"
)

func refreshCmd() *cobra.Command {
	f := &stackFlags{}
	cmd := &cobra.Command{
		Use:   "refresh",
		Short: "Read every resource back from its provider into state (changes no resource)",
		Long: `refresh reads every resource of the stack back from its provider and records
what it finds in state. It changes no resource; the next preview then
shows the difference between the program and what is live. Use
'milner preview --refresh' to see the difference without writing state.`,
		Example: `  milner refresh --stack dev --yes`,
		RunE: f.run(true, func(o *pipeline.Op) error {
			if err := o.Confirm("Record the live state of the stack's resources?"); err != nil {
				return err
			}
			r, err := o.St.Refresh(o.Ctx)
			if err != nil {
				return err
			}
			fmt.Printf("milner refresh: stack %q: %d resources read, %d differed from state\n", o.St.Name(), len(r.Steps), len(r.Changes()))
			return nil
		}),
	}
	f.addStack(cmd, false)
	f.addYes(cmd)
	return cmd
}
