package main

import (
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/internal/status"
)

func statusCmd() *cobra.Command {
	f := &stackFlags{}
	var versions bool
	var talosconfigFile string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a stack's backend, resources by layer and nodes from its state; --versions asks every node what it runs",
		Long: `status reads the stack's state (no engine run): its backend, resources by
layer, protected count, nodes, and when the talosconfig and kubeconfig
client certificates and the cluster CAs expire (a warning within 30 days;
'milner talosconfig|kubeconfig --renew' renews a client certificate). With --versions it also asks every node,
through the Talos API, which Talos and Kubernetes versions it runs, against
the declared ones, marking every difference ('milner upgrade' closes it),
and whether it holds a config staged for its next reboot (Talos v1.10 and
later), whoever staged it: without --versions, "staged" is the state's
word, which a reboot since makes stale.`,
		Example: `  milner status --stack dev
  milner status --stack dev --versions
  milner status --stack dev --json`,
		RunE: f.run(false, func(o *pipeline.Op) error {
			s, err := status.Collect(o, versions, talosconfigFile)
			if err != nil {
				return err
			}
			return emit(f.json, s, func() { s.Write(os.Stdout) }, nil)
		}),
	}
	f.addStack(cmd, false)
	cmd.Flags().BoolVar(&versions, "versions", false, "ask every node which Talos and Kubernetes versions it runs (Talos API)")
	cmd.Flags().StringVar(&talosconfigFile, "talosconfig", "", "talosconfig file for --versions (default: the stack state's, else $TALOSCONFIG or ~/.talos/config)")
	return cmd
}

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
		RunE: f.run(false, func(o *pipeline.Op) error {
			outs, err := o.St.Outputs(o.Ctx, show)
			if err != nil {
				return err
			}
			var v any = outs
			if len(o.Args) == 1 {
				var ok bool
				if v, ok = outs[o.Args[0]]; !ok {
					return fmt.Errorf("stack %q has no output %q", o.St.Name(), o.Args[0])
				}
			}
			switch v := v.(type) {
			case string:
				return emit(f.json, v, func() { fmt.Println(v) }, nil)
			case map[string]any:
				return emit(f.json, v, func() {
					for _, k := range slices.Sorted(maps.Keys(v)) {
						fmt.Printf("%-12s %v\n", k, v[k])
					}
				}, nil)
			}
			return emit(true, v, nil, nil)
		}),
	}
	f.addStack(cmd, false)
	cmd.Flags().BoolVar(&show, "show-secrets", false, "print secret outputs in the clear")
	return cmd
}
