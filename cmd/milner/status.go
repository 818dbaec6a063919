package main

import (
	"fmt"
	"github.com/milner/milner/internal/clientfiles"
	"github.com/milner/milner/internal/pipeline"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/certs"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/upgrade"
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
	Versions *upgrade.Versions `json:"versions,omitempty"`
	// Certificates are the client certificates' and CAs' lifetimes.
	Certificates []certs.Cert `json:"certificates"`
	// Staged are the nodes whose last Talos config apply was staged: it
	// waits for the node's next reboot (Milner never reboots a node).
	Staged []string `json:"staged"`
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
		RunE: f.run(false, func(o *pipeline.Op) error {
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			resources, err := o.Resources()
			if err != nil {
				return err
			}
			outs, err := o.Outputs()
			if err != nil {
				return err
			}
			s := status{Stack: o.St.Name(), Cluster: cfg.Cluster.Name, Backend: o.St.Backend(), Resources: map[string]int{}, Nodes: outs["nodes"],
				Certificates: certLifetimes(o)}
			for _, r := range resources {
				s.Resources[string(gate.LayerOf(r.Type, r.Name()))]++
				if r.Protect {
					s.Protected++
				}
				if mode, _ := r.Inputs["applyMode"].(string); r.Type == gate.TypeConfigApply && mode == gate.ModeStaged {
					s.Staged = append(s.Staged, strings.TrimSuffix(r.Name(), "-apply"))
				}
			}
			if versions {
				v := o.AskVersions(talosconfigFile)
				s.Versions = &v
			}
			return emit(f.json, s, s.write, nil)
		}),
	}
	f.addStack(cmd, false)
	f.addJSON(cmd)
	cmd.Flags().BoolVar(&versions, "versions", false, "ask every node which Talos and Kubernetes versions it runs (Talos API)")
	cmd.Flags().StringVar(&talosconfigFile, "talosconfig", "", "talosconfig file for --versions (default: the stack state's, else $TALOSCONFIG or ~/.talos/config)")
	return cmd
}

// write prints the status as text, then the versions asked (if any).
func (s *status) write() {
	if s.Versions != nil {
		defer s.Versions.Write(os.Stdout)
	}
	fmt.Printf("stack %s (cluster %s) on %s\n", s.Stack, s.Cluster, s.Backend)
	if len(s.Resources) == 0 {
		fmt.Println("  no resources in state")
		return
	}
	for _, l := range slices.Sorted(maps.Keys(s.Resources)) {
		fmt.Printf("  %-22s %d resources\n", l, s.Resources[l])
	}
	fmt.Printf("  protected              %d\n", s.Protected)
	if nodes, ok := s.Nodes.([]any); ok {
		fmt.Println("nodes:")
		for _, n := range nodes {
			m, _ := n.(map[string]any)
			line := fmt.Sprintf("  %-8v %-13v %v", m["name"], m["role"], m["address"])
			if name, _ := m["name"].(string); slices.Contains(s.Staged, name) {
				line += "  staged: its last config applies at its next reboot (`talosctl -n <node> reboot`)"
			}
			fmt.Println(line)
		}
	}
	fmt.Printf("certificates (warned within %d days):\n", int(certs.WarnWithin.Hours()/24))
	for _, c := range s.Certificates {
		fmt.Printf("  %s\n", c.Line(time.Now()))
	}
}

// certLifetimes are the stack's client certificates and CAs, as `milner
// status` shows them; what cannot be read says why.
func certLifetimes(o *pipeline.Op) []certs.Cert {
	outs, err := o.Outputs()
	if err != nil {
		return []certs.Cert{{Name: "certificates", Err: err.Error()}}
	}
	talos, _ := outs[clientfiles.Talos.Output].(string)
	kube, _ := outs[clientfiles.Kube.Output].(string)
	bundle, err := o.Bundle()
	return certs.Lifetimes(talos, kube, bundle, err)
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
	f.addJSON(cmd)
	cmd.Flags().BoolVar(&show, "show-secrets", false, "print secret outputs in the clear")
	return cmd
}
