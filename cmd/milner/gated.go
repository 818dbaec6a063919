package main

import (
	"fmt"
	"github.com/milner/milner/components/vocab"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/applymode"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks"
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
	// run are the program's per-run options, set between the checks and
	// the preview (applyModes) and, by up, before the update.
	runOpts *stacks.RunOptions
	// allowContract is up's --allow-contract-change; nil for preview,
	// which checks no contract.
	allowContract *bool
}

func (f *gatedFlags) add(cmd *cobra.Command) {
	f.addStack(cmd, false)
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
	Versions upgrade.Versions `json:"versions"`
	// Mirrored are the charts fetched through milner:chartMirrors.
	Mirrored []config.MirroredChart `json:"mirrored,omitempty"`
}

// previewGated is what preview and up share: one load of the stack's
// config, one preview with a plan, and the guards, the layer rules and the
// interlocks judging that preview's steps. It prints the report (or keeps
// it for --json) and returns the outcome and the plan.
func previewGated(o *op, f *gatedFlags) (*gated, *engine.Plan, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, nil, err
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(os.Stderr, "milner: warning: %s\n", w)
	}
	if f.allowContract != nil {
		if err := checkContract(o, *f.allowContract); err != nil {
			return nil, nil, err
		}
	}
	// The token's privileges are checked before the preview asks the API anything.
	if err := preflightProxmox(o); err != nil {
		return nil, nil, err
	}
	opts, err := planOptions(o, f)
	if err != nil {
		return nil, nil, err
	}
	if err := applyModes(o, f); err != nil {
		return nil, nil, err
	}
	res, plan, err := o.st.PreviewPlan(o.ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	view, err := guardSubstrate(o, res.Steps)
	if err != nil {
		return nil, nil, err
	}
	g := &gated{Stack: o.st.Name(), Backend: o.st.Backend(), Report: gate.NewReport(res.Steps, cfg.Cluster.Name),
		Mirrored: config.Mirrored(o.file)}
	if g.Refusals, err = layerRefusals(o, f, res.Steps, view, g.Report, opts.Replace); err != nil {
		return nil, nil, err
	}
	if err := verifyBootImage(cfg, g.Report); err != nil {
		return nil, nil, err
	}
	// The nodes' running versions against the declared: drift is never
	// silent, and a Talos config change while nodes lag is refused
	// (upgrade.CheckUp).
	g.Versions = askVersions(o, f.talosconfig)
	g.Lagging, g.VersionsNote = upgrade.Lagging(g.Versions.Declared, g.Versions.Rows), g.Versions.Note
	if err := upgrade.CheckUp(g.Versions.Declared, g.Versions.Rows, configUpdated(g.Report, f.replace)); err != nil {
		g.Refusals = append(g.Refusals, gate.Refusal{Resource: "Talos machine configs", Reason: err.Error(),
			Instead: fmt.Sprintf("milner upgrade --stack %s", o.st.Name())})
	}
	if !f.json {
		g.write(o.out)
	}
	return g, plan, nil
}

// planOptions are the preview's: --refresh, the URNs of the VMs --replace
// names, and with --os-disk that node's OS volume and config apply.
func planOptions(o *op, f *gatedFlags) (engine.PlanOptions, error) {
	opts := engine.PlanOptions{Refresh: f.refresh}
	for _, n := range f.replace {
		vm, err := o.nodeVM(n)
		if err != nil {
			return opts, err
		}
		if vm == nil {
			return opts, refused("--replace %s: the state has no VM %q for that node; name a node of this stack (see docs/stacks.md)", n, o.cfg.Cluster.Name+"-"+n)
		}
		opts.Replace = append(opts.Replace, string(vm.URN))
	}
	targets, err := osDiskTargets(o, f)
	opts.Replace = append(opts.Replace, targets...)
	return opts, err
}

// applyModes has the program send each node's Talos config in the mode
// the node's answer calls for (internal/applymode), decided once for the
// preview and the update that applies its plan. A node whose apply is not
// in state takes its first config; --os-disk's node boots a new OS disk.
func applyModes(o *op, f *gatedFlags) error {
	d := &applymode.Decider{First: map[string]bool{}, Fresh: map[string]bool{}, Recorded: map[string]string{}, Applied: map[string]string{}}
	applied, err := o.st.EachOutputsInClear(o.ctx, gate.TypeConfigApply)
	if err != nil {
		return err
	}
	for _, n := range o.cfg.Nodes {
		apply, err := o.find(gate.TypeConfigApply, n.Name+"-apply")
		if err != nil {
			return err
		}
		if apply == nil {
			d.First[n.Name] = true
			continue
		}
		d.Recorded[n.Name], _ = apply.Inputs["applyMode"].(string)
		d.Applied[n.Name], _ = applied[n.Name+"-apply"]["machineConfiguration"].(string)
	}
	if f.osDisk && len(f.replace) == 1 {
		d.Fresh[f.replace[0]] = true
	}
	ctx := o.ctx
	f.runOpts.ApplyMode = func(r applymode.Request) string { return d.Mode(ctx, r) }
	return nil
}

// nodeVM is the node's VM in state ("<cluster>-<node>"), or nil.
func (o *op) nodeVM(node string) (*engine.Resource, error) {
	res, err := o.resources()
	if err != nil {
		return nil, err
	}
	for i, r := range res {
		if gate.IsNodeVM(r.Type) && r.Name() == o.cfg.Cluster.Name+"-"+node {
			return &res[i], nil
		}
	}
	return nil, nil
}

// layerRefusals are every rule the preview's steps break: the layer
// rules, a second secrets bundle (against the live node VMs of the
// guard's view, nil without a substrate layer), a second bootstrap.
func layerRefusals(o *op, f *gatedFlags, steps []gate.Step, view *substrateView, report gate.Report, targets []string) ([]gate.Refusal, error) {
	refusals := gate.Check(report, f.replace, targets)
	bundle := gate.CheckSecretsBundle(steps, liveNodeVMs(view), o.st.Name())
	second, err := bootstrapRefusals(o, steps)
	if err != nil {
		return nil, err
	}
	return slices.Concat(refusals, bundle, second), nil
}

// write prints the report, the mirrored charts, the versions and the refusals.
func (g *gated) write(out io.Writer) {
	g.Report.Write(out)
	if len(g.Mirrored) > 0 {
		_, _ = fmt.Fprintf(out, "\ncharts fetched through milner:chartMirrors (the stack pins the published source):\n")
		for _, m := range g.Mirrored {
			_, _ = fmt.Fprintf(out, "  %s: %s -> %s\n", m.App, m.Published, m.Fetch)
		}
	}
	g.Versions.Write(out)
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

// guardSubstrate refuses an up that would recreate or duplicate live
// substrate objects the preview's steps declare: empty state while the
// machines live, or orphans (a create whose name, or Proxmox VM id, is
// already live), and a state older than the substrate by identity. It
// reads the libvirt host, or the Proxmox API, named by the config, and
// prints the exact adopt commands. It returns the view it judged (nil
// without a substrate layer).
func guardSubstrate(o *op, steps []gate.Step) (*substrateView, error) {
	if !o.cfg.Declares(config.LayerSubstrate) {
		return nil, nil // an existing cluster (startAt: apps) declares no machines
	}
	v, err := viewSubstrate(o, steps)
	if err != nil {
		return nil, err
	}
	// It prints the findings and refuses: first the live objects missing
	// from the stack's state, then a state older than the host by identity.
	what := "live substrate objects"
	if o.cfg.Substrate.Kind == config.KindProxmox {
		what = "live Proxmox VMs"
	}
	missing := guard.Check(o.st.Name(), v.declared, v.state, v.live, v.configOf)
	if err := refuseList(missing, what+" are not in the stack's state; refused before touching anything (%d problems)",
		"%s are not in the stack's state; adopt them or restore the state (see above); nothing was changed", what); err != nil {
		return nil, err
	}
	stale := guard.Stale(o.st.Name(), v.declared, v.state, v.live)
	return v, refuseList(stale, "the state does not match the host's objects by identity; refused before touching anything (%d problems)",
		"the state is older than the host (see above); nothing was changed")
}

// substrateView is what the substrate guard and `milner adopt --all`
// compare: what the stack declares, what its state holds, what lives on
// the substrate (and, on Proxmox, a live VM's config).
type substrateView struct {
	declared []guard.Declared
	state    guard.State
	live     []guard.Object
	configOf func(host string, vmid int) map[string]any
}

func viewSubstrate(o *op, steps []gate.Step) (*substrateView, error) {
	declared, err := guard.DeclaredBy(steps, o.cfg.Cluster.Name)
	if err != nil {
		return nil, err
	}
	resources, err := o.resources()
	if err != nil {
		return nil, err
	}
	v := &substrateView{declared: declared, state: guard.State{}}
	for _, r := range resources {
		host, _ := r.Inputs["nodeName"].(string) // a Proxmox VM's host
		v.state[guard.Ref{Type: r.Type, Logical: r.Name()}] = guard.Object{ID: r.ID, Host: host}
	}
	v.live, v.configOf, err = listLive(o.ctx, o)
	return v, err
}

// verifyBootImage checks the boot image when the preview creates the boot
// media (the only time libvirt reads the image: its source is ignored
// afterwards): a local image against its pinned digest; a remote one with
// a digest is downloaded into its verified local copy, which the program
// names as the media's source (config.LibvirtConfig.BootSource). The
// default factory image without a digest is downloaded by the provider,
// unverified: config validation warns about it.
func verifyBootImage(cfg *config.Config, report gate.Report) error {
	lv := cfg.Substrate.Libvirt
	if lv == nil || lv.BootImageSHA256 == "" {
		return nil
	}
	if !slices.ContainsFunc(report.Delta(gate.Persistent).Creates, func(c gate.Change) bool {
		return c.Type == gate.TypeLibvirtVolume && strings.HasSuffix(c.Name, vocab.BootSuffix)
	}) {
		return nil
	}
	url := lv.BootImage
	if url == "" {
		url = config.DefaultBootImage(cfg.Cluster.TalosVersion)
	}
	var err error
	if strings.Contains(url, "://") {
		err = guard.FetchBootImage(http.DefaultClient, url, lv.BootImageSHA256, config.BootImageCache(lv.BootImageSHA256))
	} else {
		err = guard.VerifyBootImage(url, lv.BootImageSHA256)
	}
	if err != nil {
		return refused("%v", err)
	}
	return nil
}

func previewCmd() *cobra.Command {
	f := &gatedFlags{runOpts: &stacks.RunOptions{}}
	f.program = stacks.NewProgram(f.runOpts)
	cmd := &cobra.Command{
		Use:   "preview",
		Short: "Show the delta `up` would apply, by layer, and what the layer rules refuse",
		Long: `preview runs the program on the engine without changing anything and prints
the delta grouped by layer (persistent substrate, node VMs, Talos, apps),
the nodes whose Talos change may stage a reboot, each node's declared
against running Talos and Kubernetes versions (asked through the Talos API
with the state's talosconfig; one line when they cannot be asked), and
every rule the delta breaks: exactly what 'milner up' would print before
asking. A Talos config update while a node runs other versions than
declared is refused: 'milner upgrade' moves versions.`,
		Example: `  milner preview --stack dev
  milner preview --stack dev --replace cp-2        # what replacing cp-2's VM would do
  milner preview --stack prod --expect-no-changes  # CI drift check: exit 4 on any change
  milner preview --stack dev --json | jq .report`,
		RunE: f.run(false, func(o *op) error {
			g, _, err := previewGated(o, f)
			if err != nil {
				return err
			}
			return emit(f.json, g, g.verdict(f))
		}),
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&f.refresh, "refresh", false, "read every resource back from its provider first")
	return cmd
}
