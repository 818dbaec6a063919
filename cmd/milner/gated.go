package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/pve"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
)

// gatedFlags are the flags of preview and up.
type gatedFlags struct {
	stackFlags
	replace         []string
	refresh         bool
	expectNoChanges bool
	talosconfig     string
	osDisk          bool // up only: --os-disk (replace.go)
	// allowContract is up's --allow-contract-change; nil for preview,
	// which checks no contract.
	allowContract *bool
}

func (f *gatedFlags) add(cmd *cobra.Command) {
	f.addStack(cmd)
	f.addJSON(cmd)
	cmd.Flags().StringArrayVar(&f.replace, "replace", nil, "recreate this node's VM (repeatable); the replaced VMs must be exactly the named ones")
	_ = cmd.RegisterFlagCompletionFunc("replace", completeNodes)
	cmd.Flags().BoolVar(&f.expectNoChanges, "expect-no-changes", false, "exit 4 if the stack has any change (a CI drift check); up then applies nothing")
	cmd.Flags().StringVar(&f.talosconfig, "talosconfig", "", "talosconfig the nodes are asked their versions with (default: the stack state's, else $TALOSCONFIG or ~/.talos/config)")
}

// gated is the outcome of a gated preview, as --json prints it.
type gated struct {
	Stack    string         `json:"stack"`
	Backend  string         `json:"backend"`
	Report   gate.Report    `json:"report"`
	Refusals []gate.Refusal `json:"refusals"`
	Applied  bool           `json:"applied"`
	// Staged are the nodes whose applied Talos config waits for a reboot.
	Staged []string `json:"staged,omitempty"`
	// Lagging are the nodes that run other versions than declared.
	Lagging []string `json:"lagging,omitempty"`
	// VersionsNote says why the nodes' versions are not known ("" when they are).
	VersionsNote string `json:"versionsNote,omitempty"`
	// Versions is the versions table the text prints.
	Versions versionsView `json:"versions"`
	// Mirrored are the charts fetched through milner:chartMirrors.
	Mirrored []config.MirroredChart `json:"mirrored,omitempty"`
}

// previewGated is what preview and up share: one load of the stack's
// config, one preview with a plan, and the guards, the layer rules and the
// interlocks judging that preview's steps. It prints the report (or keeps
// it for --json) and returns the outcome and the plan.
func previewGated(ctx context.Context, f *gatedFlags, st *engine.Stack, out io.Writer) (*gated, *engine.Plan, error) {
	cfg, raw, err := loadStack(st)
	if err != nil {
		return nil, nil, err
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(os.Stderr, "milner: warning: %s\n", w)
	}
	if f.allowContract != nil {
		if err := checkContract(ctx, st, cfg, *f.allowContract); err != nil {
			return nil, nil, err
		}
	}
	// The token's privileges are checked before the preview asks the API anything.
	px, err := preflightProxmox(ctx, st, cfg)
	if err != nil {
		return nil, nil, err
	}
	opts, err := planOptions(ctx, f, st, cfg.Cluster.Name)
	if err != nil {
		return nil, nil, err
	}
	res, plan, err := st.PreviewPlan(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	if err := guardSubstrate(ctx, st, cfg, px, res.Steps); err != nil {
		return nil, nil, err
	}
	g := &gated{Stack: st.Name(), Backend: st.Backend(), Report: gate.NewReport(res.Steps, cfg.Cluster.Name),
		Mirrored: config.Mirrored(stackSource{st, raw})}
	if g.Refusals, err = layerRefusals(ctx, f, st, cfg, res.Steps, g.Report, opts.Replace); err != nil {
		return nil, nil, err
	}
	if err := verifyBootImage(cfg, g.Report); err != nil {
		return nil, nil, err
	}
	versions := g.askVersions(ctx, f, st)
	if !f.json {
		g.write(out, versions)
	}
	return g, plan, nil
}

// planOptions are the preview's: --refresh, the URNs of the VMs --replace
// names, and with --os-disk that node's OS volume and config apply.
func planOptions(ctx context.Context, f *gatedFlags, st *engine.Stack, cluster string) (engine.PlanOptions, error) {
	opts := engine.PlanOptions{Refresh: f.refresh}
	if len(f.replace) == 0 {
		return opts, nil
	}
	resources, err := st.Resources(ctx)
	if err != nil {
		return opts, err
	}
	if opts.Replace, err = replaceTargets(resources, cluster, f.replace); err != nil {
		return opts, err
	}
	opts.Replace = append(opts.Replace, osDiskTargets(resources, cluster, f)...)
	return opts, nil
}

// layerRefusals are every rule the preview's steps break: the layer
// rules, a second secrets bundle, a second bootstrap.
func layerRefusals(ctx context.Context, f *gatedFlags, st *engine.Stack, cfg *config.Config, steps []gate.Step, report gate.Report, targets []string) ([]gate.Refusal, error) {
	refusals := gate.Check(report, f.replace, targets)
	bundle, err := secretsBundleRefusals(st, cfg, steps)
	if err != nil {
		return nil, err
	}
	second, err := bootstrapRefusals(ctx, st, steps)
	if err != nil {
		return nil, err
	}
	return append(append(refusals, bundle...), second...), nil
}

// askVersions asks the nodes their versions and sets the declared against
// running view. Drift is never silent, and a Talos config change while
// nodes lag is refused (upgrade.CheckUp).
func (g *gated) askVersions(ctx context.Context, f *gatedFlags, st *engine.Stack) upgrade.Versions {
	versions := askVersions(ctx, st, f.talosconfig)
	g.Lagging, g.VersionsNote = upgrade.Lagging(versions.Declared, versions.Rows), versions.Note
	g.Versions = viewVersions(versions)
	if err := upgrade.CheckUp(versions.Declared, versions.Rows, configUpdated(g.Report, f.replace)); err != nil {
		g.Refusals = append(g.Refusals, gate.Refusal{Resource: "Talos machine configs", Reason: err.Error(),
			Instead: fmt.Sprintf("milner upgrade --stack %s", st.Name())})
	}
	return versions
}

// write prints the report, the mirrored charts, the versions and the refusals.
func (g *gated) write(out io.Writer, versions upgrade.Versions) {
	g.Report.Write(out)
	if len(g.Mirrored) > 0 {
		_, _ = fmt.Fprintf(out, "\ncharts fetched through milner:chartMirrors (the stack pins the published source):\n")
		for _, m := range g.Mirrored {
			_, _ = fmt.Fprintf(out, "  %s: %s -> %s\n", m.App, m.Published, m.Fetch)
		}
	}
	versions.Write(out)
	if len(g.Refusals) > 0 {
		_, _ = fmt.Fprintf(out, "\nrefused by the layer rules (%d):\n", len(g.Refusals))
		for _, r := range g.Refusals {
			_, _ = fmt.Fprintf(out, "  - %s\n", r)
		}
	}
}

// verdict turns a gated outcome into the command's error: refusals first,
// then pending changes under --expect-no-changes.
func (g *gated) verdict(f *gatedFlags) error {
	switch {
	case len(g.Refusals) > 0:
		return refused("the preview breaks %d layer rules; nothing was applied", len(g.Refusals))
	case f.expectNoChanges && !g.Report.Empty():
		return fmt.Errorf("stack %q: %w (--expect-no-changes)", g.Stack, errPending)
	}
	return nil
}

// replaceTargets maps the nodes named with --replace to the URNs of their
// VMs in state ("<cluster>-<node>"). A node that is not in state is a
// refusal: there is nothing to replace.
func replaceTargets(resources []engine.Resource, cluster string, nodes []string) ([]string, error) {
	var urns []string
	for _, n := range nodes {
		want := cluster + "-" + n
		found := ""
		for _, r := range resources {
			if gate.IsNodeVM(r.Type) && r.Name() == want {
				found = string(r.URN)
			}
		}
		if found == "" {
			return nil, refused("--replace %s: the state has no VM %q for that node; name a node of this stack (see docs/stacks.md)", n, want)
		}
		urns = append(urns, found)
	}
	return urns, nil
}

// guardSubstrate refuses an up that would recreate or duplicate live
// substrate objects the preview's steps declare: empty state while the
// machines live, or orphans (a create whose name is already live). It reads
// the libvirt host, or the Proxmox API through px, named by the config.
func guardSubstrate(ctx context.Context, st *engine.Stack, cfg *config.Config, px *pve.Client, steps []gate.Step) error {
	switch {
	case !cfg.Declares(config.LayerSubstrate):
		return nil // an existing cluster (startAt: apps) declares no machines
	case cfg.Substrate.Kind == config.KindProxmox:
		return guardProxmox(ctx, st, cfg, px, steps)
	}
	v, err := viewLibvirt(ctx, st, cfg, steps)
	if err != nil {
		return err
	}
	if err := refuseFindings(guard.Check(st.Name(), v.declared, v.inState, v.live), "live substrate objects"); err != nil {
		return err
	}
	return refuseStale(guard.Stale(st.Name(), v.declared, v.stateID, v.live))
}

// refuseStale prints the identity guard's findings and refuses.
func refuseStale(findings []guard.Finding) error {
	if len(findings) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "milner: the state does not match the host's objects by identity; refused before touching anything (%d problems):\n", len(findings))
	for _, f := range findings {
		fmt.Fprintf(os.Stderr, "  - %s\n", f)
	}
	return refused("the state is older than the host (see above); nothing was changed")
}

// refuseFindings prints the guard's findings and refuses, or returns nil
// when there are none. what names the objects the state lacks.
func refuseFindings(findings []guard.Finding, what string) error {
	if len(findings) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "milner: %s are not in the stack's state; refused before touching anything (%d problems):\n", what, len(findings))
	for _, f := range findings {
		fmt.Fprintf(os.Stderr, "  - %s\n", f)
	}
	return refused("%s are not in the stack's state; adopt them or restore the state (see above); nothing was changed", what)
}

// libvirtView is what the libvirt guard and `milner adopt --all` compare:
// what the stack declares, what its state holds, what lives on the host.
type libvirtView struct {
	declared []guard.Declared
	inState  func(typ, logical string) bool
	stateID  func(typ, logical string) string
	live     []guard.Object
}

func viewLibvirt(ctx context.Context, st *engine.Stack, cfg *config.Config, steps []gate.Step) (*libvirtView, error) {
	declared, err := guard.DeclaredLibvirt(steps, cfg.Cluster.Name)
	if err != nil {
		return nil, err
	}
	resources, err := st.Resources(ctx)
	if err != nil {
		return nil, err
	}
	inState := map[string]bool{}
	ids := map[string]string{}
	for _, r := range resources {
		inState[r.Type+"::"+r.Name()] = true
		ids[r.Type+"::"+r.Name()] = r.ID
	}
	live, err := guard.ListLibvirt(cfg.Substrate.Libvirt.URI)
	if err != nil {
		return nil, err
	}
	return &libvirtView{declared, func(typ, logical string) bool { return inState[typ+"::"+logical] },
		func(typ, logical string) string { return ids[typ+"::"+logical] }, live}, nil
}
