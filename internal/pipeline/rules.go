package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/internal/chartindex"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/pve"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
)

// The rules of the previewing verbs (preview, up, up --replace, up
// --os-disk, upgrade's record), each a function of the run's plan and
// observations; tables.go lists them per verb.

// replaceOneNode refuses --replace of several nodes on a running cluster
// (oneNodeAtATime).
func replaceOneNode(o *Op) ([]gate.Refusal, error) {
	resources, err := o.Resources()
	if err != nil {
		return nil, err
	}
	return nil, oneNodeAtATime(resources, o.in.Replace)
}

// osDiskLibvirt refuses --os-disk on a substrate whose OS disk is no
// volume of its own (Proxmox: a disk of the holder VM).
func osDiskLibvirt(o *Op) ([]gate.Refusal, error) {
	if !o.osDisk() || o.cfg.Substrate.Kind == config.KindLibvirt {
		return nil, nil
	}
	return nil, Refused("--os-disk: a %s node's OS disk is a disk of its holder VM, not a volume of its own; follow docs/runbooks/lost-os-disk.md (Proxmox); nothing was changed", o.cfg.Substrate.Kind)
}

// replaceTalosAPI dials the replaced nodes' Talos API: --os-disk needs it
// to remove the node's etcd member (refused without it); a plain replace
// goes on without it, powering the VMs off.
func replaceTalosAPI(o *Op) ([]gate.Refusal, error) {
	if len(o.in.Replace) == 0 {
		return nil, nil
	}
	_, err := o.talosCluster()
	switch {
	case err != nil && o.osDisk():
		return nil, Refused("--os-disk: the Talos API is needed to remove the node's etcd member: %v; nothing was changed", err)
	case err != nil:
		fmt.Fprintf(os.Stderr, "milner up: the nodes cannot be asked to shut down (%v); the replace powers their VMs off\n", err)
	}
	return nil, nil
}

// osDiskQuorum refuses an --os-disk member removal that loses etcd's
// quorum (or removes the last control plane), and keeps the removal for
// the apply.
func osDiskQuorum(o *Op) ([]gate.Refusal, error) {
	if !o.osDisk() {
		return nil, nil
	}
	c, err := o.talosCluster()
	if err != nil || c == nil {
		return nil, nil
	}
	o.obs.removal, err = c.MemberRemovalFor(o.Ctx, o.in.Replace[0])
	if errors.Is(err, upgrade.ErrUnsafeMemberRemoval) {
		return nil, Refused("--os-disk %s: %v", o.in.Replace[0], err)
	}
	return nil, err
}

// osDiskVolume refuses --os-disk for a node whose OS volume is not in state.
func osDiskVolume(o *Op) ([]gate.Refusal, error) {
	if !o.osDisk() {
		return nil, nil
	}
	vol, err := o.Find(gate.TypeLibvirtVolume, osVolume(o.cfg, o.in.Replace[0]))
	if err != nil || vol != nil {
		return nil, err
	}
	return nil, Refused("--os-disk %s: the state has no OS volume %q; nothing was changed", o.in.Replace[0], osVolume(o.cfg, o.in.Replace[0]))
}

// configContract refuses, before anything is previewed, a change of the
// config contract the cluster's secrets bundle was created with, unless
// --allow-contract-change.
func configContract(o *Op) ([]gate.Refusal, error) {
	bundle, err := o.Find(gate.TypeTalosSecrets, "")
	if err != nil {
		return nil, err
	}
	recorded := ""
	if bundle != nil {
		recorded, _ = bundle.Inputs["talosVersion"].(string)
	}
	if refusals := gate.CheckContract(recorded, o.cfg.Cluster.ConfigContract, o.in.AllowContract); len(refusals) > 0 {
		return nil, Refused("%s; nothing was changed", refusals[0])
	}
	return nil, nil
}

// proxmoxPrivileges reads the token's effective privileges and names every
// one the program needs but lacks, before the preview asks the API anything.
func proxmoxPrivileges(o *Op) ([]gate.Refusal, error) {
	c, err := o.proxmox()
	if err != nil || c == nil {
		return nil, err
	}
	px := o.cfg.Substrate.Proxmox
	plan := pve.Plan{DiskDatastores: []string{px.OSDatastore, px.DataDatastore}, ImageDatastore: px.ImageDatastore, Bridge: px.Bridge}
	if o.cfg.StopAfter.Includes(config.LayerTalos) {
		// The first configs go up as snippets only with the Talos layer
		// (stacks.DeployWith).
		plan.SnippetsDatastore = px.SnippetsDatastore
	}
	for _, n := range o.cfg.Nodes {
		plan.VMIDs = append(plan.VMIDs, n.VMID, vocab.HolderVMID(n.VMID))
	}
	perms, err := c.Permissions(o.Ctx)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, m := range pve.Missing(perms, pve.Needs(plan)) {
		missing = append(missing, fmt.Sprintf("%s on %s (%s)", m.Priv, m.Path, m.Why))
	}
	return nil, refuseList(missing, "refused before touching anything: the API token lacks %d privileges",
		"grant the missing privileges to the token (docs/proxmox.md \"Token privileges\"); nothing was changed")
}

// proxmoxKnownHosts refuses, before anything is touched, a Proxmox stack
// whose first configs go over SSH (milner:substrate.proxmox.ssh) to a host
// that ~/.ssh/known_hosts, the file the provider reads, does not know, or
// that shows another host key than it holds.
func proxmoxKnownHosts(o *Op) ([]gate.Refusal, error) {
	c, err := o.proxmox()
	if err != nil || c == nil || o.cfg.Substrate.Proxmox.SSH == nil {
		return nil, err
	}
	hosts := map[string]string{}
	for _, n := range o.cfg.Nodes {
		if _, done := hosts[n.ProxmoxNode]; done {
			continue
		}
		addr, err := c.SSHAddress(o.Ctx, n.ProxmoxNode)
		if err != nil {
			return nil, err
		}
		hosts[n.ProxmoxNode] = addr
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, err
	}
	findings, err := guard.KnownHosts(o.Ctx, filepath.Join(home, ".ssh", "known_hosts"), hosts, guard.DialHostKey)
	if err != nil {
		return nil, err
	}
	return nil, refuseList(findings, "refused before touching anything: %d Proxmox hosts are not in known_hosts or show another key",
		"add the hosts' keys to known_hosts after checking them (see above); nothing was changed")
}

// replaceInState refuses a --replace of a node whose VM is not in state.
func replaceInState(o *Op) ([]gate.Refusal, error) {
	for _, n := range o.in.Replace {
		vm, err := o.nodeVM(n)
		if err != nil {
			return nil, err
		}
		if vm == nil {
			return nil, Refused("--replace %s: the state has no VM %q for that node; name a node of this stack (see docs/stacks.md)", n, o.cfg.Cluster.Name+"-"+n)
		}
	}
	return nil, nil
}

// substrateWhat names the live objects the guard lists.
func (o *Op) substrateWhat() string {
	if o.cfg.Substrate.Kind == config.KindProxmox {
		return "live Proxmox VMs"
	}
	return "live substrate objects"
}

// substrateInState refuses an up that would recreate or duplicate live
// substrate objects the plan declares: empty state while the machines
// live, or orphans (a create whose name, or Proxmox VM id, is already
// live). It reads the libvirt host, or the Proxmox API, named by the
// config, and prints the exact adopt commands.
func substrateInState(o *Op) ([]gate.Refusal, error) {
	v, err := o.substrate()
	if err != nil || v == nil {
		return nil, err
	}
	what := o.substrateWhat()
	missing := guard.Check(o.St.Name(), v.declared, v.state, v.live, v.configOf)
	return nil, refuseList(missing, what+" are not in the stack's state; refused before touching anything (%d problems)",
		"%s are not in the stack's state; adopt them or restore the state (see above); nothing was changed", what)
}

// stateIdentity refuses a state older than the substrate by identity, and
// a volume whose file was recreated at its path unless --accept-recreated
// names it; an --accept-recreated that names no such volume is refused.
// The volumes the state records no file identity of are said (the up
// records them: Op.recordsIdentities).
func stateIdentity(o *Op) ([]gate.Refusal, error) {
	v, err := o.substrate()
	if err != nil || v == nil {
		return nil, err
	}
	var stale []guard.Finding
	accepted := map[string]bool{}
	for _, f := range guard.Stale(o.St.Name(), v.declared, v.state, v.live) {
		if f.Recreated != "" && slices.Contains(o.in.AcceptRecreated, f.Recreated) {
			accepted[f.Recreated] = true
			continue
		}
		stale = append(stale, f)
	}
	if err := refuseList(stale, "the state does not match the host's objects by identity; refused before touching anything (%d problems)",
		"the state does not match the host (see above); nothing was changed"); err != nil {
		return nil, err
	}
	for _, n := range o.in.AcceptRecreated {
		if !accepted[n] {
			return nil, Refused("--accept-recreated %s: no volume of that logical name has a file other than the one the state records (or milner cannot tell here: a remote URI, no identity recorded); nothing was changed", n)
		}
	}
	if un := guard.Unrecorded(v.declared, v.state, v.live); len(un) > 0 {
		slices.Sort(un)
		fmt.Fprintf(os.Stderr, "milner: the state records no file identity of volume %s yet (a stack from before milner recorded them, or an update stopped before it did): nothing to compare, so a volume recreated at its path is not told this time; the up records them\n", strings.Join(un, ", "))
	}
	return nil, nil
}

// recordsIdentities are the volumes whose file identity the up records in
// state while the state records none (guard.Unrecorded) or one the
// operator replaced (--accept-recreated): nothing changes on the host, but
// the up runs for them even when the delta is empty.
func (o *Op) recordsIdentities() []string {
	v := o.obs.view
	if v == nil {
		return nil
	}
	out := slices.Concat(guard.Unrecorded(v.declared, v.state, v.live), o.in.AcceptRecreated)
	slices.Sort(out)
	return out
}

// layerRules are the layer rules of gate.Check: no replace or delete of
// persistent substrate, no replace but of a named node VM, no delete of a
// Helm release or of the cluster secrets, no address change in place.
func layerRules(o *Op) ([]gate.Refusal, error) {
	return gate.Check(o.plan.report, o.in.Replace, o.plan.targets), nil
}

// oneSecretsBundle refuses a second secrets bundle beside the cluster's
// nodes, in state or live (gate.CheckSecretsBundle).
func oneSecretsBundle(o *Op) ([]gate.Refusal, error) {
	v, err := o.substrate()
	if err != nil {
		return nil, err
	}
	return gate.CheckSecretsBundle(o.plan.res.Steps, liveNodeVMs(v), o.waitingNode, o.St.Name()), nil
}

// oneBootstrap refuses a second bootstrap of etcd, asking the control
// planes only when the plan could bootstrap (gate.CheckBootstrap).
func oneBootstrap(o *Op) ([]gate.Refusal, error) {
	if !gate.BootstrapNeedsAsking(o.plan.res.Steps) {
		return nil, nil
	}
	b, ok, err := o.bootstrap()
	if err != nil || !ok {
		return nil, err
	}
	return gate.CheckBootstrap(o.plan.res.Steps, b.Etcd.Bootstrapped(), b.Etcd.String(), o.St.Name()), nil
}

// oneNewNode refuses a plan that adds more than one node to a running
// cluster (gate.CheckOneNewNode).
func oneNewNode(o *Op) ([]gate.Refusal, error) {
	return gate.CheckOneNewNode(o.plan.report, o.St.Name()), nil
}

// bootImage checks the boot image when the plan creates the boot media
// (the only time libvirt reads the image: its source is ignored
// afterwards): an image with a pinned digest, local or remote, is copied
// into its verified, content-addressed local copy, which the program names
// as the media's source (config.LibvirtConfig.BootSource). The
// default factory image without a digest is downloaded by the provider,
// unverified: config validation warns about it.
func bootImage(o *Op) ([]gate.Refusal, error) {
	lv := o.cfg.Substrate.Libvirt
	if lv == nil || lv.BootImageSHA256 == "" {
		return nil, nil
	}
	if !slices.ContainsFunc(o.plan.report.Delta(gate.Persistent).Of(gate.Create), func(c gate.Change) bool {
		return c.Type == gate.TypeLibvirtVolume && strings.HasSuffix(c.Name, vocab.BootSuffix)
	}) {
		return nil, nil
	}
	url := lv.BootImage
	if url == "" {
		url = config.DefaultBootImage(o.cfg.Cluster.TalosVersion)
	}
	if err := guard.CopyBootImage(o.Ctx, http.DefaultClient, url, lv.BootImageSHA256, lv.BootSource()); err != nil {
		return nil, Refused("%v", err)
	}
	return nil, nil
}

// versionsInterlock refuses a Talos config change while a node runs other
// versions than declared (upgrade.CheckUp): drift is never silent, and
// `milner upgrade` moves versions.
func versionsInterlock(o *Op) ([]gate.Refusal, error) {
	v := o.versions()
	if err := upgrade.CheckUp(v.Declared, v.Rows, configUpdated(o.plan.report, o.in.Replace)); err != nil {
		return []gate.Refusal{{Resource: "Talos machine configs", Reason: err.Error(),
			Instead: fmt.Sprintf("milner upgrade --stack %s", o.St.Name())}}, nil
	}
	return nil, nil
}

// replaceAppsReady refuses, right before the apply, a replace while an app
// Pod on another node is not Ready (a sealed Vault peer: the replace would
// take a second one down, and raft's quorum with it). The replaced node's
// own Pods are excused: it may be dead. An API that cannot be asked (the
// recovery of a cluster already down) is reported and the replace goes on.
func replaceAppsReady(o *Op) ([]gate.Refusal, error) {
	if len(o.in.Replace) == 0 {
		return nil, nil
	}
	apps, err := o.Apps(false)
	if err != nil {
		return nil, err
	}
	err = apps.ReadyBesides(o.Ctx, o.in.Replace)
	var notReady *upgrade.NotReadyError
	switch {
	case errors.As(err, &notReady):
		return nil, Refused("--replace %s: %v; replacing now would take another peer down; nothing was changed", strings.Join(o.in.Replace, ", "), err)
	case err != nil:
		_, _ = fmt.Fprintf(o.Out, "milner up: the apps cannot be asked (%v): the replace goes on without the apps gate\n", err)
	}
	return nil, nil
}

// configUpdated reports whether a report updates or replaces the Talos
// machine config of a node other than the replaced ones: what would push
// versions to a running node. A node's first config (a create, or that of
// a replaced VM) is its install, at the declared versions.
func configUpdated(r gate.Report, replaced []string) bool {
	d := r.Delta(gate.Talos)
	for _, cs := range [][]gate.Change{d.Of(gate.Update), d.Of(gate.Replace)} {
		for _, c := range cs {
			if c.Type == gate.TypeConfigApply && !slices.Contains(replaced, c.Node) {
				return true
			}
		}
	}
	return false
}

// refuseList prints, when there are problems, the header (formatted with
// their count) and each problem on stderr, and returns the refusal;
// otherwise nil.
func refuseList[T any](problems []T, header string, refusal string, a ...any) error {
	if len(problems) == 0 {
		return nil
	}
	if header != "" {
		fmt.Fprintf(os.Stderr, "milner: "+header+":\n", len(problems))
	}
	for _, p := range problems {
		fmt.Fprintf(os.Stderr, "  - %v\n", p)
	}
	return Refused(refusal, a...)
}

// proxmoxDiskShrink refuses, with the delta, a disk holder whose disk the
// plan shrinks: Proxmox refuses any shrink (qemu-server API2/Qemu.pm
// resize_vm: "shrinking disks is not supported"), and bpg says so only in
// the holder's update, mid-apply (proxmoxtf/resource/vm/vm.go
// vmUpdateDiskLocationAndSize: "Cannot shrink ... it is not supported!"),
// after `up --replace` has shut the node down for its VM's replace.
func proxmoxDiskShrink(o *Op) ([]gate.Refusal, error) {
	var out []gate.Refusal
	for _, s := range o.plan.res.Steps {
		if s.Type != gate.TypeProxmoxVM || !strings.HasSuffix(s.Name(), vocab.HolderSuffix) || s.Inputs == nil {
			continue
		}
		old, err := o.Find(s.Type, s.Name())
		if err != nil || old == nil {
			return out, err
		}
		was, now := diskGiB(old.Inputs), diskGiB(s.Inputs)
		node := strings.TrimSuffix(strings.TrimPrefix(s.Name(), o.cfg.Cluster.Name+"-"), vocab.HolderSuffix)
		for i, field := range []string{"osDiskGiB", "dataDiskGiB"} {
			if i < len(was) && i < len(now) && now[i] < was[i] {
				out = append(out, gate.Refusal{Resource: s.Name(),
					Reason:  fmt.Sprintf("node %s's %s would shrink from %d to %d GiB, which Proxmox refuses (the provider only mid-apply)", node, field, was[i], now[i]),
					Instead: fmt.Sprintf("set milner:nodes[%s].%s back to %d or more: a disk only grows", node, field, was[i])})
			}
		}
	}
	return out, nil
}

// diskGiB reads a Proxmox VM's inputs' disks[].size, in order.
func diskGiB(inputs map[string]any) []int {
	disks, _ := inputs["disks"].([]any)
	out := make([]int, 0, len(disks))
	for _, d := range disks {
		m, _ := d.(map[string]any)
		size, _ := m["size"].(float64)
		out = append(out, int(size))
	}
	return out
}

// policyPack refuses what the stack's policy pack found (internal/policypack,
// the rules plain `pulumi preview --policy-pack policy` runs), one refusal
// per violation, naming its policy.
func policyPack(o *Op) ([]gate.Refusal, error) {
	var out []gate.Refusal
	for _, v := range o.plan.res.Violations {
		msg := v.Message
		if _, rest, ok := strings.Cut(msg, "\n"); ok {
			msg = rest // the policy's description, then the violation
		}
		out = append(out, gate.Refusal{Resource: resource.URN(v.URN).Name(),
			Reason:  fmt.Sprintf("policy %s: %s", v.Policy, msg),
			Instead: "fix the program or the stack config (internal/policypack says why the policy holds)"})
	}
	return out, nil
}

// chartsPublished refuses, before anything is planned, a chart version its
// source does not publish: every remote chart is asked of where it is
// fetched from (its milner:chartMirrors mirror, else its published
// repository: chartindex), all at once, each refusal naming the config
// path and what the source lists. A source that cannot be asked is warned
// about, not refused (the preview's own chart fetch then fails on it in
// Helm's words).
func chartsPublished(o *Op) ([]gate.Refusal, error) {
	cfg := o.cfg
	if !cfg.Declares(config.LayerApps) {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(o.Ctx, chartIndexTimeout)
	defer cancel()
	var problems []string
	for _, c := range cfg.RemoteCharts() {
		source := cfg.ChartMirrors.Fetch(c.Chart.Repo)
		ok, known, err := chartindex.Published(ctx, http.DefaultClient, source, c.Chart.Name, c.Chart.Version)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "milner: warning: %s.version: cannot ask %s which %s versions it publishes: %v\n", c.Path, source, c.Chart.Name, err)
		case !ok:
			problems = append(problems, fmt.Sprintf("%s.version: %s %s is not published at %s (it publishes %s); set a version it publishes",
				c.Path, c.Chart.Name, c.Chart.Version, source, newest(known, 5)))
		}
	}
	if len(problems) > 0 {
		return nil, Refused("%s", strings.Join(problems, "\n  "))
	}
	return nil, nil
}

// chartIndexTimeout bounds asking every chart source.
const chartIndexTimeout = 30 * time.Second

// newest names up to n of the newest versions of known.
func newest(known []string, n int) string {
	if len(known) == 0 {
		return "no version of it"
	}
	vs := slices.Clone(known)
	slices.SortFunc(vs, func(a, b string) int { return semver.Compare("v"+b, "v"+a) })
	if len(vs) > n {
		return strings.Join(vs[:n], ", ") + ", ..."
	}
	return strings.Join(vs, ", ")
}
