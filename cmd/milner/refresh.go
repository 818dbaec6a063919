package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/pipeline"
)

// refreshed is refresh's result (--json).
type refreshed struct {
	Stack    string `json:"stack"`
	Read     int    `json:"read"`
	Differed int    `json:"differed"`
	// Pulumi is what `pulumi refresh --json` prints: its engine events
	// (engine.Result.JSON).
	Pulumi json.RawMessage `json:"pulumi,omitempty"`
}

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
			res := refreshed{Stack: o.St.Name(), Read: len(r.Steps), Differed: len(r.Changes())}
			if f.json {
				if res.Pulumi, err = r.JSON(); err != nil {
					return err
				}
			}
			return emit(f.json, res, func() {
				fmt.Printf("milner refresh: stack %q: %d resources read, %d differed from state\n", res.Stack, res.Read, res.Differed)
			}, nil)
		}),
	}
	f.addStack(cmd, false)
	f.addYes(cmd)
	return cmd
}
