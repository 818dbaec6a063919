package main

import (
	"fmt"
	"os"
	"sort"

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
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop, st, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer stop()
			outs, err := st.Outputs(ctx, show)
			if err != nil {
				return err
			}
			var v any = outs
			if len(args) == 1 {
				var ok bool
				if v, ok = outs[args[0]]; !ok {
					return fmt.Errorf("stack %q has no output %q", st.Name(), args[0])
				}
			}
			if s, ok := v.(string); ok && !f.json {
				fmt.Println(s)
				return nil
			}
			if m, ok := v.(map[string]any); ok && !f.json {
				keys := make([]string, 0, len(m))
				for k := range m {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					fmt.Printf("%-12s %v\n", k, m[k])
				}
				return nil
			}
			return writeJSON(os.Stdout, v)
		},
	}
	f.addStack(cmd)
	f.addJSON(cmd)
	cmd.Flags().BoolVar(&show, "show-secrets", false, "print secret outputs in the clear")
	return cmd
}
