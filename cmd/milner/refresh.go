package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
)

func refreshCmd() *cobra.Command {
	f := &stackFlags{}
	var yes bool
	cmd := &cobra.Command{
		Use:   "refresh",
		Short: "Read every resource back from its provider into state (changes no resource)",
		Long: `refresh reads every resource of the stack back from its provider and records
what it finds in state. It changes no resource; the next preview then
shows the difference between the program and what is live. Use
'milner preview --refresh' to see the difference without writing state.`,
		Example: `  milner refresh --stack dev --yes`,
		Args:    cobra.NoArgs,
		RunE: f.run(true, func(ctx context.Context, st *engine.Stack) error {
			if !yes {
				if err := confirm(ctx, os.Stdin, os.Stdout, "Record the live state of the stack's resources?", st.Name()); err != nil {
					return err
				}
			}
			r, err := st.Refresh(ctx)
			if err != nil {
				return err
			}
			fmt.Printf("milner refresh: stack %q: %d resources read, %d differed from state\n", st.Name(), len(r.Steps), len(r.Changes()))
			return nil
		}),
	}
	f.addStack(cmd)
	addYes(cmd, &yes)
	return cmd
}
