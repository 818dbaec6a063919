// Package gate classifies the steps of a preview by layer and refuses the
// deltas the seeds' shipping rules forbid: `milner up` applies nothing the
// gate refused. It is pure: input is the preview's steps, output a Report
// and the Refusals, so it is tested on recorded event streams.
package gate

import (
	"github.com/milner/milner/components/vocab"
	"strings"
)

// Layer is the layer of the cluster a resource belongs to. The order of
// Layers is the order a report prints them in.
type Layer string

// The layers.
const (
	// Persistent is substrate that carries data or every node: pools,
	// networks, volumes, boot media, Proxmox disk holder VMs. Never replaced
	// or deleted outside a full teardown.
	Persistent Layer = "persistent substrate"
	// Disposable is the node VMs (libvirt domains, Proxmox node VMs): the
	// only resources a change may replace, and only when named.
	Disposable Layer = "disposable substrate"
	// Talos is the machine configuration layer (talos:*).
	Talos Layer = "talos"
	// Apps is the Kubernetes layer: Helm releases and other kubernetes:* resources.
	Apps Layer = "apps"
	// Other is everything else: components, providers, the stack.
	Other Layer = "other"
)

// Layers lists every layer in report order.
var Layers = []Layer{Persistent, Disposable, Talos, Apps, Other}

// Type tokens of the resources Milner's tools name: the gate, the guard,
// the conformance rules and the recording mock all use these, defined once.
const (
	TypeLibvirtDomain  = "libvirt:index/domain:Domain"
	TypeLibvirtVolume  = "libvirt:index/volume:Volume"
	TypeLibvirtNetwork = "libvirt:index/network:Network"
	TypeLibvirtPool    = "libvirt:index/pool:Pool"
	TypeProxmoxVM      = "proxmoxve:VM/virtualMachine:VirtualMachine"
	TypeProxmoxImage   = "proxmoxve:Download/file:File"
	TypeProxmoxFile    = "proxmoxve:Storage/file:File"
	TypeConfigApply    = "talos:machine/configurationApply:ConfigurationApply"
	TypeTalosSecrets   = "talos:machine/secrets:Secrets"
	TypeTalosBootstrap = "talos:machine/bootstrap:Bootstrap"
	TypeKubeconfig     = "talos:cluster/kubeconfig:Kubeconfig"
	TypeHelmRelease    = "kubernetes:helm.sh/v3:Release"
)

// layerRule maps a type token (exact, or a prefix when it ends in "*") and
// an optional logical-name suffix to a layer. The first matching rule wins.
type layerRule struct {
	typ        string
	nameSuffix string
	layer      Layer
}

var layerRules = []layerRule{
	// Providers are never data, whatever package they configure.
	{"pulumi:providers:*", "", Other},
	{TypeLibvirtPool, "", Persistent},
	{TypeLibvirtNetwork, "", Persistent},
	{TypeLibvirtVolume, "", Persistent},
	{TypeProxmoxImage, "", Persistent},
	{TypeProxmoxFile, "", Persistent},
	{TypeProxmoxVM, vocab.HolderSuffix, Persistent},
	{TypeLibvirtDomain, "", Disposable},
	{TypeProxmoxVM, "", Disposable},
	{"talos:*", "", Talos},
	{"kubernetes:*", "", Apps},
}

// LayerOf returns the layer of a resource from its type token and logical name.
func LayerOf(typ, name string) Layer {
	for _, r := range layerRules {
		if !matchType(r.typ, typ) || !strings.HasSuffix(name, r.nameSuffix) {
			continue
		}
		return r.layer
	}
	return Other
}

func matchType(pattern, typ string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(typ, prefix)
	}
	return pattern == typ
}

// IsNodeVM reports whether typ is the type of a node VM (or, on Proxmox, of
// a disk holder VM, which shares it): what --replace may name.
func IsNodeVM(typ string) bool { return typ == TypeLibvirtDomain || typ == TypeProxmoxVM }
