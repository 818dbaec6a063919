package main

import (
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/spf13/cobra"
)

func outputCmd() *cobra.Command {
	f := &stackFlags{}
	var show bool
	cmd := &cobra.Command{
		Use:   "output [name]",
		Short: "Print the stack's outputs (secrets masked unless --show-secrets)",
		Example: `  milner output --stack dev
  milner output --stack dev nodes --json
  milner output --stack dev kubeconfig --show-secrets`,
		Args: cobra.MaximumNArgs(1),
		RunE: f.run(false, func(o *op) error {
			outs, err := o.st.Outputs(o.ctx, show)
			if err != nil {
				return err
			}
			var v any = outs
			if len(o.args) == 1 {
				var ok bool
				if v, ok = outs[o.args[0]]; !ok {
					return fmt.Errorf("stack %q has no output %q", o.st.Name(), o.args[0])
				}
			}
			if !f.json {
				switch v := v.(type) {
				case string:
					fmt.Println(v)
					return nil
				case map[string]any:
					for _, k := range slices.Sorted(maps.Keys(v)) {
						fmt.Printf("%-12s %v\n", k, v[k])
					}
					return nil
				}
			}
			return writeJSON(os.Stdout, v)
		}),
	}
	f.addStack(cmd, false)
	f.addJSON(cmd)
	cmd.Flags().BoolVar(&show, "show-secrets", false, "print secret outputs in the clear")
	return cmd
}
