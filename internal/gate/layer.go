// Package gate classifies the steps of a preview by layer and refuses the
// deltas the seeds' shipping rules forbid: `milner up` applies nothing the
// gate refused. It is pure: input is the preview's steps, output a Report
// and the Refusals, so it is tested on recorded event streams.
package gate

import (
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

// Type tokens the gate and the conformance rules name.
const (
	TypeLibvirtDomain  = "libvirt:index/domain:Domain"
	TypeProxmoxVM      = "proxmoxve:VM/virtualMachine:VirtualMachine"
	TypeConfigApply    = "talos:machine/configurationApply:ConfigurationApply"
	TypeTalosSecrets   = "talos:machine/secrets:Secrets"
	TypeTalosBootstrap = "talos:machine/bootstrap:Bootstrap"
	TypeHelmRelease    = "kubernetes:helm.sh/v3:Release"
)

// HolderSuffix ends the logical name of a Proxmox disk holder VM
// ("<cluster>-<node>-disks", see components/substrate/proxmox.go): a VM
// that is never started and only owns a node's disks, so they survive a
// replace of the node VM.
const HolderSuffix = "-disks"

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
	{"libvirt:index/pool:Pool", "", Persistent},
	{"libvirt:index/network:Network", "", Persistent},
	{"libvirt:index/volume:Volume", "", Persistent},
	{"proxmoxve:Download/file:File", "", Persistent},
	{"proxmoxve:Storage/file:File", "", Persistent},
	{TypeProxmoxVM, HolderSuffix, Persistent},
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
