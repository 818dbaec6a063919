package pipeline

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	sidx509 "github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/internal/applymode"
	"github.com/milner/milner/internal/clientfiles"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/fileid"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/pve"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
)

// observations are what a run's rules judge besides the plan, each fetched
// once, on first use, and kept for the run.
type observations struct {
	view     *substrateView // the substrate guard's view; nil without one
	viewDone bool
	pve      *pve.Client
	pveDone  bool
	versions *upgrade.Versions
	boot     *bootstrapState
	bootOK   bool
	// The Talos side of a replace (replace.go).
	cluster     *upgrade.Cluster // nil when no node holds a Talos config
	clusterErr  error
	clusterDone bool
	removal     *upgrade.MemberRemoval
	osVolume    resource.URN // unprotected for the run; "" without --os-disk
	// The removal of `up --remove` (remove.go).
	removed        *upgrade.Node        // the node, as the state recorded it
	nodeRemoval    *upgrade.NodeRemoval // nil on a stack without Talos config
	retained       []engine.Resource    // retained for the run, protected again unless applied
	removedApplied bool
	apps           *upgrade.Apps
	appsDone       bool
}

// Bounds of asking the nodes; they are asked at once, so a dead node costs
// each bound once.
const (
	versionsTimeout = 15 * time.Second
	etcdAskTimeout  = 15 * time.Second
)

// substrateView is what the substrate guard and `milner adopt --all`
// compare: what the stack declares, what its state holds, what lives on
// the substrate (and, on Proxmox, a live VM's config).
type substrateView struct {
	declared []guard.Declared
	state    guard.State
	live     []guard.Object
	configOf func(host string, vmid int) map[string]any
}

// substrate is the view of the substrate the plan's steps declare: nil
// for a stack that declares no substrate layer (startAt: apps).
func (o *Op) substrate() (*substrateView, error) {
	if o.obs.viewDone {
		return o.obs.view, nil
	}
	if !o.cfg.Declares(config.LayerSubstrate) {
		o.obs.viewDone = true
		return nil, nil
	}
	declared, err := guard.DeclaredBy(o.plan.res.Steps, o.cfg.Cluster.Name)
	if err != nil {
		return nil, err
	}
	resources, err := o.Resources()
	if err != nil {
		return nil, err
	}
	v := &substrateView{declared: declared, state: guard.State{}}
	var recorded map[string]any // volume identities by logical name
	for _, r := range resources {
		host, _ := r.Inputs["nodeName"].(string) // a Proxmox VM's host
		name, _ := r.Inputs["name"].(string)     // the libvirt or PVE name (libvirt, bpg: input "name")
		v.state[guard.Ref{Type: r.Type, Logical: r.Name()}] = guard.Object{ID: r.ID, Host: host, Name: name}
		if r.Type == substrate.LibvirtType {
			recorded, _ = r.Outputs[substrate.VolumeIdentities].(map[string]any)
		}
	}
	for ref, s := range v.state {
		if ref.Type == gate.TypeLibvirtVolume {
			s.Incarnation, _ = recorded[ref.Logical].(string)
			v.state[ref] = s
		}
	}
	if v.live, v.configOf, err = o.listLive(o.Ctx); err != nil {
		return nil, err
	}
	o.identifyVolumes(v)
	o.obs.view, o.obs.viewDone = v, true
	return v, nil
}

// identifyVolumes reads the identity of the file of each live volume in a
// pool the stack declares, where the files are on this machine (a local
// URI, as the program records them: stacks.newSubstrate).
func (o *Op) identifyVolumes(v *substrateView) {
	lv := o.cfg.Substrate.Libvirt
	if lv == nil || !lv.Local() {
		return
	}
	pools := map[string]bool{}
	for _, d := range v.declared {
		if d.Type == gate.TypeLibvirtVolume {
			pools[d.Pool] = true
		}
	}
	for i, l := range v.live {
		if l.Type == gate.TypeLibvirtVolume && pools[l.Pool] {
			v.live[i].Incarnation = fileid.Of(l.ID)
		}
	}
}

// waitingNode reports whether the node whose VM has this logical name
// answers the Talos API in maintenance mode (applymode.InMaintenance, the
// provider's own probe): it holds no config, so it trusts no CA
// (gate.CheckSecretsBundle). A name of no node in the config, or a node
// that does not answer so within 10 s, is not waiting.
func (o *Op) waitingNode(vm string) bool {
	for _, n := range o.cfg.Nodes {
		if o.cfg.Cluster.Name+"-"+n.Name == vm {
			ctx, cancel := context.WithTimeout(o.Ctx, 10*time.Second)
			defer cancel()
			return applymode.InMaintenance(ctx, n.Addr.String())
		}
	}
	return false
}

// liveNodeVMs are the libvirt domains of the substrate view (nil: none)
// named like the node VMs the preview declares: what
// gate.CheckSecretsBundle weighs a created bundle against. The Proxmox
// inventory declares no domain; there the rule sees state and imports only.
func liveNodeVMs(v *substrateView) []string {
	if v == nil {
		return nil
	}
	var out []string
	for _, d := range v.declared {
		if d.Type == gate.TypeLibvirtDomain && slices.ContainsFunc(v.live, func(l guard.Object) bool { return l.Type == gate.TypeLibvirtDomain && l.Name == d.Name }) {
			out = append(out, d.Name)
		}
	}
	return out
}

// proxmox is a PVE API client with the stack's endpoint, token and TLS
// setting; nil for a stack that declares no Proxmox substrate.
func (o *Op) proxmox() (*pve.Client, error) {
	if o.obs.pveDone {
		return o.obs.pve, nil
	}
	px := o.cfg.Substrate.Proxmox
	if px == nil || !o.cfg.Declares(config.LayerSubstrate) {
		o.obs.pveDone = true
		return nil, nil
	}
	token := o.file.Raw[config.Key(config.ProxmoxTokenKey)]
	c, err := pve.New(px.Endpoint, token, px.Insecure, nil)
	o.obs.pve, o.obs.pveDone = c, err == nil
	return c, err
}

// listLive lists every object on the stack's substrate, read-only: the
// libvirt host's domains, networks, pools and volumes, or the Proxmox
// cluster's guests with configOf, which reads a live VM's config (nil
// when unreadable). It asks each time: a replace polls it.
func (o *Op) listLive(ctx context.Context) (live []guard.Object, configOf func(string, int) map[string]any, err error) {
	if o.cfg.Substrate.Kind == config.KindLibvirt {
		live, err = guard.ListLibvirt(o.cfg.Substrate.Libvirt.URI)
		return live, nil, err
	}
	c, err := o.proxmox()
	switch {
	case err != nil:
		return nil, nil, err
	case c == nil:
		return nil, nil, fmt.Errorf("stack %q declares no Proxmox substrate to list", o.St.Name())
	}
	configOf = func(host string, vmid int) map[string]any {
		cfg, err := c.VMConfig(ctx, host, vmid)
		if err != nil {
			return nil
		}
		return cfg
	}
	live, err = guard.ListProxmox(ctx, c)
	return live, configOf, err
}

// versions asks every declared node what it runs (upgrade.AskVersions)
// with the talosconfig of a stack whose nodes hold a config. It never
// fails: why nothing could be asked is the Note.
func (o *Op) versions() upgrade.Versions {
	if o.obs.versions == nil {
		v := o.askVersions(o.in.Talosconfig)
		o.obs.versions = &v
	}
	return *o.obs.versions
}

// AskVersions asks every declared node what it runs, with file (""
// appliedTalosconfig's default). It never fails: why nothing could be
// asked is the Note.
func (o *Op) AskVersions(file string) upgrade.Versions { return o.askVersions(file) }

func (o *Op) askVersions(file string) upgrade.Versions {
	cfg, err := o.Config()
	if err != nil {
		return upgrade.Versions{Note: err.Error()}
	}
	v := upgrade.Versions{Declared: upgrade.FromConfig(cfg)}
	tc, err := o.appliedTalosconfig(file)
	if err != nil {
		v.Note = err.Error()
		return v
	}
	return upgrade.AskVersions(o.Ctx, tc, v.Declared, versionsTimeout)
}

// errNoTalosConfig: there is nothing to ask the nodes yet.
var errNoTalosConfig = errors.New("no node holds a Talos config in the state yet")

// appliedTalosconfig is talosconfig for a stack some node of which holds a
// Talos config in state (errNoTalosConfig otherwise, unless file is given):
// what the versions and a replace's shutdown ask the nodes with.
func (o *Op) appliedTalosconfig(file string) (*clientconfig.Config, error) {
	if file == "" {
		held, err := o.Find(gate.TypeConfigApply, "")
		if err != nil {
			return nil, err
		}
		if held == nil {
			return nil, errNoTalosConfig
		}
	}
	return o.talosconfig(file)
}

// talosconfig is the talosconfig the nodes are asked with: file, else the
// state's talosconfig output, else the user's ($TALOSCONFIG or
// ~/.talos/config). `milner upgrade` asks with it whatever the state holds.
func (o *Op) talosconfig(file string) (*clientconfig.Config, error) {
	if file == "" {
		outs, err := o.Outputs()
		if err != nil {
			return nil, fmt.Errorf("talosconfig from the state: %w", err)
		}
		if s, ok := outs[clientfiles.Talos.Output].(string); ok && s != "" {
			return clientconfig.FromString(s)
		}
		if file, err = clientfiles.Talos.Path(""); err != nil {
			return nil, err
		}
	}
	// Open reads a missing file as an empty config; say which file is missing.
	if _, err := os.Stat(file); err != nil {
		return nil, fmt.Errorf("talosconfig: %w", err)
	}
	return clientconfig.Open(file)
}

// bootstrapState is what Milner knows of a stack's bootstrap.
type bootstrapState struct {
	// InState: the state holds <cluster>-bootstrap.
	InState bool
	// Recorded: the stack file sets milner:cluster.adoptBootstrap.
	Recorded bool
	// Etcd is the control planes' answer (asked only when neither).
	Etcd upgrade.Etcd
}

// bootstrap says whether the stack's cluster was bootstrapped: by its
// state, its stack file's record, or else by asking the control planes for
// etcd members with the bundle's client certificate. A stack that does not
// declare the Talos layer is never asked (ok false). The error is a missing
// bundle: nothing on an adopted cluster's Talos layer can go on without it.
func (o *Op) bootstrap() (b bootstrapState, ok bool, err error) {
	if o.obs.boot != nil {
		return *o.obs.boot, o.obs.bootOK, nil
	}
	cfg, err := o.Config()
	if err != nil || !cfg.Declares(config.LayerTalos) {
		return b, false, err
	}
	b.Recorded = cfg.Cluster.AdoptBootstrap
	inState, err := o.Find(gate.TypeTalosBootstrap, "")
	if err != nil {
		return b, false, err
	}
	if b.InState = inState != nil; !b.InState && !b.Recorded {
		d := upgrade.FromConfig(cfg)
		tc, err := o.bundleTalosconfig(d)
		if err != nil {
			return b, false, Refused("%v: the stack declares the Talos layer, so its nodes can be managed only with the cluster's own secrets bundle; import it first: `milner secrets import --stack %s --in <bundle.age> --identity <key.txt>` (docs/runbooks/adopt.md says where an adopted cluster's bundle comes from)", err, o.St.Name())
		}
		b.Etcd = upgrade.AskEtcd(o.Ctx, tc, d, etcdAskTimeout)
	}
	o.obs.boot, o.obs.bootOK = &b, true
	return b, true, nil
}

// bundleTalosconfig is a talosconfig for the declared control planes with
// the admin client certificate of the secrets bundle in state (the
// <cluster>-secrets clientConfiguration output: base64 PEM, as
// terraform-provider-talos v0.10.1 writes it and reads it back in
// talosClientTFConfigToTalosClientConfig). It errors when the state holds
// no bundle.
func (o *Op) bundleTalosconfig(d upgrade.Declared) (*clientconfig.Config, error) {
	_, outs, err := o.St.OutputsInClear(o.Ctx, gate.TypeTalosSecrets)
	if err != nil {
		return nil, err
	}
	cc, _ := outs["clientConfiguration"].(map[string]any)
	var pem [3][]byte
	for i, k := range []string{"caCertificate", "clientCertificate", "clientKey"} {
		s, _ := cc[k].(string)
		if pem[i], err = base64.StdEncoding.DecodeString(s); err != nil || s == "" {
			return nil, fmt.Errorf("stack %q: the secrets bundle's clientConfiguration.%s is not base64 PEM", o.St.Name(), k)
		}
	}
	var endpoints []string
	for _, n := range d.Nodes {
		endpoints = append(endpoints, n.Endpoint)
	}
	return clientconfig.NewConfig(o.cfg.Cluster.Name, endpoints, pem[0], &sidx509.PEMEncodedCertificateAndKey{Crt: pem[1], Key: pem[2]}), nil
}

// Apps is the apps layer's readiness gate (upgrade.Apps), asked with the
// stack's kubeconfig output; nil when the stack declares no apps, or, unless
// required, when the state holds no kubeconfig (no cluster ran yet).
func (o *Op) Apps(required bool) (*upgrade.Apps, error) {
	if o.obs.appsDone {
		return o.obs.apps, nil
	}
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	if len(cfg.Apps) == 0 && !cfg.Storage.On() {
		o.obs.appsDone = true
		return nil, nil
	}
	outs, err := o.Outputs()
	if err != nil {
		return nil, err
	}
	raw, _ := outs[clientfiles.Kube.Output].(string)
	switch {
	case raw == "" && !required:
		o.obs.appsDone = true
		return nil, nil
	case raw == "":
		return nil, fmt.Errorf("stack %q has no kubeconfig output: the apps gate between nodes needs it (run `milner up` through the Talos layer first)", o.St.Name())
	}
	apps, err := upgrade.NewApps(cfg, []byte(raw))
	if err != nil {
		return nil, fmt.Errorf("stack %q: %w", o.St.Name(), err)
	}
	o.obs.apps, o.obs.appsDone = apps, true
	return apps, nil
}
