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
	// Names are the apps' host names and how the workstation resolves
	// them (none when no app is exposed).
	Names *Names `json:"names,omitempty"`
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
		Certificates: certLifetimes(o), Names: NamesOf(cfg)}
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
	if s.Names != nil {
		defer s.Names.Write(w)
	}
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
			name, _ := m["name"].(string)
			if note := s.stagedNote(name); note != "" {
				line += "  " + note
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

// stagedNote says whether a node has a config waiting for its next
// reboot: from the node when --versions asked it (upgrade.Row.Staged),
// else from the state (its last apply was staged), saying which; "" when
// neither says so.
func (s *Report) stagedNote(node string) string {
	const apply = " (`talosctl -n <node> reboot` applies it)"
	inState := slices.Contains(s.Staged, node)
	var row *upgrade.Row
	if s.Versions != nil {
		if i := slices.IndexFunc(s.Versions.Rows, func(r upgrade.Row) bool { return r.Node.Name == node }); i >= 0 {
			row = &s.Versions.Rows[i]
		}
	}
	switch {
	case row != nil && row.Err == "" && row.Staged == upgrade.StagedYes && inState:
		return "staged: the node holds its last config for its next reboot" + apply
	case row != nil && row.Err == "" && row.Staged == upgrade.StagedYes:
		return "staged outside Milner: the node holds a config for its next reboot that Milner did not stage; the next live apply replaces it" + apply
	case row != nil && row.Err == "" && row.Staged == upgrade.StagedNo && inState:
		return "staged per the state, but the node runs that config now (rebooted since)"
	case !inState:
		return ""
	case row == nil && s.Versions == nil:
		return "staged per the state: its last config applies at its next reboot" + apply + "; --versions asks the node"
	case row == nil || row.Err != "":
		return "staged per the state; the node could not be asked" + apply
	default:
		return "staged per the state; the node cannot say (" + row.Staged + ")" + apply
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
