package main

import (
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/certs"
	"github.com/milner/milner/internal/gate"
)

// status is what `milner status` reports of a stack.
type status struct {
	Stack     string         `json:"stack"`
	Cluster   string         `json:"cluster"`
	Backend   string         `json:"backend"`
	Resources map[string]int `json:"resourcesByLayer"`
	Protected int            `json:"protected"`
	Nodes     any            `json:"nodes"`
	// Versions is --versions: what each node runs against the declared.
	Versions *versionsView `json:"versions,omitempty"`
	// Certificates are the client certificates' and CAs' lifetimes.
	Certificates []certs.Cert `json:"certificates"`
}

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
the declared ones, marking every difference ('milner upgrade' closes it).`,
		Example: `  milner status --stack dev
  milner status --stack dev --versions
  milner status --stack dev --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop, st, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer stop()
			cfg, err := st.Config()
			if err != nil {
				return err
			}
			resources, err := st.Resources(ctx)
			if err != nil {
				return err
			}
			outs, err := st.Outputs(ctx, false)
			if err != nil {
				return err
			}
			s := status{Stack: st.Name(), Cluster: clusterName(cfg), Backend: st.Backend(), Resources: map[string]int{}, Nodes: outs["nodes"],
				Certificates: certLifetimes(ctx, st)}
			for _, r := range resources {
				s.Resources[string(gate.LayerOf(r.Type, r.Name()))]++
				if r.Protect {
					s.Protected++
				}
			}
			if f.json {
				if versions {
					v := viewVersions(askVersions(ctx, st, talosconfigFile))
					s.Versions = &v
				}
				return writeJSON(os.Stdout, s)
			}
			defer func() {
				if versions {
					askVersions(ctx, st, talosconfigFile).Write(os.Stdout)
				}
			}()
			fmt.Printf("stack %s (cluster %s) on %s\n", s.Stack, s.Cluster, s.Backend)
			if len(resources) == 0 {
				fmt.Println("  no resources in state")
				return nil
			}
			layers := make([]string, 0, len(s.Resources))
			for l := range s.Resources {
				layers = append(layers, l)
			}
			sort.Strings(layers)
			for _, l := range layers {
				fmt.Printf("  %-22s %d resources\n", l, s.Resources[l])
			}
			fmt.Printf("  protected              %d\n", s.Protected)
			if nodes, ok := s.Nodes.([]any); ok {
				fmt.Println("nodes:")
				for _, n := range nodes {
					m := asMap(n)
					fmt.Printf("  %-8v %-13v %v\n", m["name"], m["role"], m["address"])
				}
			}
			fmt.Printf("certificates (warned within %d days):\n", int(certs.WarnWithin.Hours()/24))
			for _, c := range s.Certificates {
				fmt.Printf("  %s\n", c.Line(time.Now()))
			}
			return nil
		},
	}
	f.addStack(cmd)
	f.addJSON(cmd)
	cmd.Flags().BoolVar(&versions, "versions", false, "ask every node which Talos and Kubernetes versions it runs (Talos API)")
	cmd.Flags().StringVar(&talosconfigFile, "talosconfig", "", "talosconfig file for --versions (default: the stack state's, else $TALOSCONFIG or ~/.talos/config)")
	return cmd
}
