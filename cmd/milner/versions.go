package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/upgrade"
)

// versionsTimeout bounds asking the nodes: the nodes are asked at once, so
// a dead node costs this much once.
const versionsTimeout = 15 * time.Second

// askVersions asks every declared node what it runs (upgrade.AskVersions)
// with the talosconfig of file (--talosconfig), or else the stack state's
// own talosconfig output, or else $TALOSCONFIG / ~/.talos/config. It
// never fails: why nothing could be asked is the Note.
func askVersions(ctx context.Context, st *engine.Stack, file string) upgrade.Versions {
	cfg, _, err := loadStack(st)
	if err != nil {
		return upgrade.Versions{Note: err.Error()}
	}
	v := upgrade.Versions{Declared: upgrade.FromConfig(cfg)}
	resources, err := st.Resources(ctx)
	if err != nil {
		v.Note = err.Error()
		return v
	}
	applied := false
	for _, r := range resources {
		applied = applied || r.Type == gate.TypeConfigApply
	}
	if !applied && file == "" {
		v.Note = "no node holds a Talos config in the state yet"
		return v
	}
	tc, err := versionsTalosconfig(ctx, st, file)
	if err != nil {
		v.Note = err.Error()
		return v
	}
	return upgrade.AskVersions(ctx, tc, v.Declared, versionsTimeout)
}

// versionsView is upgrade.Versions as `--json` prints it.
type versionsView struct {
	Talos      string        `json:"talosVersion"`
	Kubernetes string        `json:"kubernetesVersion"`
	Nodes      []versionsRow `json:"nodes,omitempty"`
	Note       string        `json:"note,omitempty"`
}

// versionsRow is one node's answer; Error says why it could not be asked.
type versionsRow struct {
	Node      string `json:"node"`
	Talos     string `json:"talosVersion,omitempty"`
	Kubelet   string `json:"kubelet,omitempty"`
	APIServer string `json:"apiServer,omitempty"`
	Error     string `json:"error,omitempty"`
}

// viewVersions is v for --json.
func viewVersions(v upgrade.Versions) versionsView {
	out := versionsView{Talos: v.Declared.TalosVersion, Kubernetes: v.Declared.KubernetesVersion, Note: v.Note}
	for _, r := range v.Rows {
		row := versionsRow{Node: r.Node.Name, Talos: r.Talos, Kubelet: r.Kubelet, APIServer: r.APIServer}
		if r.Err != nil {
			row.Error = r.Err.Error()
		}
		out.Nodes = append(out.Nodes, row)
	}
	return out
}

// versionsTalosconfig is the talosconfig the nodes are asked with.
func versionsTalosconfig(ctx context.Context, st *engine.Stack, file string) (*clientconfig.Config, error) {
	if file == "" {
		outs, err := st.Outputs(ctx, true)
		if err != nil {
			return nil, fmt.Errorf("talosconfig from the state: %w", err)
		}
		if s, ok := outs["talosconfig"].(string); ok && s != "" {
			return clientconfig.FromString(s)
		}
		if file, err = talosconfig.path(""); err != nil {
			return nil, err
		}
	}
	// Open reads a missing file as an empty config; say which file is missing.
	if _, err := os.Stat(file); err != nil {
		return nil, fmt.Errorf("talosconfig: %w", err)
	}
	return clientconfig.Open(file)
}

// configUpdated reports whether a report updates or replaces the Talos
// machine config of a node other than the replaced ones: what would push
// versions to a running node. A node's first config (a create, or that of
// a replaced VM) is its install, at the declared versions.
func configUpdated(r gate.Report, replaced []string) bool {
	d := r.Delta(gate.Talos)
	for _, cs := range [][]gate.Change{d.Updates, d.Replaces} {
		for _, c := range cs {
			if c.Type == gate.TypeConfigApply && !slices.Contains(replaced, c.Node) {
				return true
			}
		}
	}
	return false
}
