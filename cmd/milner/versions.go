package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/upgrade"
)

// versionsTimeout bounds asking the nodes: the nodes are asked at once, so
// a dead node costs this much once.
const versionsTimeout = 15 * time.Second

// askVersions asks every declared node what it runs (upgrade.AskVersions)
// with nodesTalosconfig(file, true). It never fails: why nothing could be
// asked is the Note.
func askVersions(o *op, file string) upgrade.Versions {
	cfg, err := o.config()
	if err != nil {
		return upgrade.Versions{Note: err.Error()}
	}
	v := upgrade.Versions{Declared: upgrade.FromConfig(cfg)}
	tc, err := nodesTalosconfig(o, file, true)
	if err != nil {
		v.Note = err.Error()
		return v
	}
	return upgrade.AskVersions(o.ctx, tc, v.Declared, versionsTimeout)
}

// errNoTalosConfig: there is nothing to ask the nodes yet.
var errNoTalosConfig = errors.New("no node holds a Talos config in the state yet")

// nodesTalosconfig is the talosconfig the nodes are asked with: file, else
// the state's talosconfig output, else the user's ($TALOSCONFIG or
// ~/.talos/config). With applied, a stack none of whose nodes holds a Talos
// config yet is errNoTalosConfig unless file is given.
func nodesTalosconfig(o *op, file string, applied bool) (*clientconfig.Config, error) {
	if applied && file == "" {
		held, err := o.find(gate.TypeConfigApply, "")
		if err != nil {
			return nil, err
		}
		if held == nil {
			return nil, errNoTalosConfig
		}
	}
	if file == "" {
		outs, err := o.outputs()
		if err != nil {
			return nil, fmt.Errorf("talosconfig from the state: %w", err)
		}
		if s, ok := outs[talosconfig.output].(string); ok && s != "" {
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
