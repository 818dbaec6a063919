// Package status is `milner status`: what a stack's state says of it
// (backend, resources by layer, protected count, nodes, the nodes whose
// last Talos config apply was staged), the lifetimes of its client
// certificates and CAs, and, when asked, what every node runs against the
// declared versions. It reads the state only: no engine run.
package status

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/milner/milner/internal/certs"
	"github.com/milner/milner/internal/clientfiles"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/internal/upgrade"
)

// Report is what `milner status` reports of a stack; its JSON is
// `milner status --json`.
type Report struct {
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
	// Issued are the client certificates `--renew` issued, as recorded in
	// the stack's backend, oldest first.
	Issued []engine.Issued `json:"issued"`
	// Staged are the nodes whose last Talos config apply was staged: it
	// waits for the node's next reboot (Milner never reboots a node).
	Staged []string `json:"staged"`
}

// Collect reads the report of o's stack; with versions it asks every node,
// with the talosconfig file ("": the state's), what it runs.
func Collect(o *pipeline.Op, versions bool, talosconfig string) (*Report, error) {
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	resources, err := o.Resources()
	if err != nil {
		return nil, err
	}
	outs, err := o.Outputs()
	if err != nil {
		return nil, err
	}
	s := &Report{Stack: o.St.Name(), Cluster: cfg.Cluster.Name, Backend: o.St.Backend(), Resources: map[string]int{}, Nodes: outs["nodes"],
		Certificates: certLifetimes(o)}
	if s.Issued, err = o.St.IssuedCertificates(o.Ctx); err != nil {
		return nil, fmt.Errorf("stack %q: issued certificates: %w", o.St.Name(), err)
	}
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
		v := o.AskVersions(talosconfig)
		s.Versions = &v
	}
	return s, nil
}

// Write prints the report as text, then the versions asked (if any).
func (s *Report) Write(w io.Writer) {
	if s.Versions != nil {
		defer s.Versions.Write(w)
	}
	_, _ = fmt.Fprintf(w, "stack %s (cluster %s) on %s\n", s.Stack, s.Cluster, s.Backend)
	if len(s.Resources) == 0 {
		_, _ = fmt.Fprintln(w, "  no resources in state")
		return
	}
	for _, l := range slices.Sorted(maps.Keys(s.Resources)) {
		_, _ = fmt.Fprintf(w, "  %-22s %d resources\n", l, s.Resources[l])
	}
	_, _ = fmt.Fprintf(w, "  protected              %d\n", s.Protected)
	if nodes, ok := s.Nodes.([]any); ok {
		_, _ = fmt.Fprintln(w, "nodes:")
		for _, n := range nodes {
			m, _ := n.(map[string]any)
			line := fmt.Sprintf("  %-8v %-13v %v", m["name"], m["role"], m["address"])
			if name, _ := m["name"].(string); slices.Contains(s.Staged, name) {
				line += "  staged: its last config applies at its next reboot (`talosctl -n <node> reboot`)"
			}
			_, _ = fmt.Fprintln(w, line)
		}
	}
	_, _ = fmt.Fprintf(w, "certificates (warned within %d days):\n", int(certs.WarnWithin.Hours()/24))
	for _, c := range s.Certificates {
		_, _ = fmt.Fprintf(w, "  %s\n", c.Line(time.Now()))
	}
	if len(s.Issued) > 0 {
		_, _ = fmt.Fprintf(w, "client certificates issued by --renew (%d):\n", len(s.Issued))
		for _, c := range s.Issued {
			_, _ = fmt.Fprintf(w, "  %s %s CN %s groups %s serial %s, expires %s, by %s (%s)\n", c.At.UTC().Format("2006-01-02 15:04:05Z"), c.Config,
				c.Subject, strings.Join(c.Groups, ","), c.Serial, c.NotAfter.UTC().Format(time.DateOnly), c.Who, c.Command)
		}
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
