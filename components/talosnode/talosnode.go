// Package talosnode applies one node's Talos machine configuration in place.
//
// A node is never reset: the configuration is applied in an apply mode that
// never reboots a running node (Args.ApplyMode), and destroying the resource
// leaves the machine as it is. The logical name created here ("<node>-apply") is a state contract.
//
// The package knows nothing of the machines: the caller passes the node's
// facts (Node), the rendered machine configuration and a readiness edge to
// the machine.
package talosnode

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"
)

// Type is the type token of the TalosNode component. It is part of every
// child's URN: changing it orphans every node's configuration in state.
const Type = "milner:components:TalosNode"

// ApplyMode is the apply mode of a node whose caller decides none (plain
// `pulumi up`): the provider applies a change live when its dry run says
// it can and stages it otherwise. milner decides each node's mode itself
// (Args.ApplyMode; internal/applymode says why).
const ApplyMode = "staged_if_needing_reboot"

// ApplySecretOutputs are the ConfigurationApply outputs the engine must store
// encrypted: the machine configuration (input and applied) holds the
// cluster's CA and service-account private keys, the client configuration
// the talosctl admin key. The provider's schema marks none of them.
var ApplySecretOutputs = []string{"machineConfigurationInput", "machineConfiguration", "clientConfiguration"}

// Role is a node's Talos machine type.
type Role string

// The roles. Their values are Talos' machine types.
const (
	RoleControlPlane Role = "controlplane"
	RoleWorker       Role = "worker"
)

// Node is what TalosNode needs to know of a machine: its facts, whichever
// substrate made it.
type Node struct {
	// Name is the node's logical name and hostname.
	Name string
	// Role is the node's Talos machine type.
	Role Role
	// Address is the node's static IPv4 address; the Talos API is dialled there.
	Address netip.Addr
	// MAC selects the node's interface in the network patch.
	MAC string
	// InstallDisk is the device Talos installs to, as the guest sees it.
	InstallDisk string
	// DataDisk is the device of the persistent data disk, as the guest sees it.
	DataDisk string
}

// PatchArgs are the cluster-wide values of a node's own patch.
type PatchArgs struct {
	// VIP is the shared control-plane address; set on control planes only.
	VIP netip.Addr
	// Prefix is the node network, giving the address's prefix length.
	Prefix netip.Prefix
	// Gateway is the default route.
	Gateway netip.Addr
	// Nameservers are the DNS servers the node uses.
	Nameservers []netip.Addr
	// InstallImage is the Talos installer image a fresh install uses.
	InstallImage string
	// AllowSchedulingOnControlPlanes lets workloads run on control planes.
	AllowSchedulingOnControlPlanes bool
	// DataMountpoint is where the node's persistent data disk is mounted.
	DataMountpoint string
	// HostnameDocument puts the hostname in a HostnameConfig document, not
	// in machine.network: the contracts that generate one (Talos v1.12+,
	// machinery's VersionContract.MultidocNetworkConfigSupported) refuse a
	// config with both ("static hostname is already set in v1alpha1 config",
	// config/types/network/hostname.go).
	HostnameDocument bool
}

// Args configures one node's Talos machine configuration.
type Args struct {
	// Node is the machine's facts.
	Node Node
	// MachineConfiguration is the node's rendered machine configuration,
	// its own patch included (see Patch).
	MachineConfiguration pulumi.StringInput
	// ExtraPatches are strategic-merge patches (JSON or YAML) applied after
	// the node's own patch, e.g. kubelet mounts, node labels or taints.
	ExtraPatches []string
	// ClientConfiguration is the talosctl client identity from the secrets bundle.
	ClientConfiguration machine.ClientConfigurationInput
	// After are resources that must be done before this node's apply
	// starts: the machines (a dependency, not data, so a replaced VM never
	// makes the address unknown) and the previous control plane's apply, so
	// that no change takes two control planes down at once.
	After []pulumi.Resource
	// AfterReady are resources known only once a check passes, e.g. the
	// previous control plane once its API server answers Ready: the apply
	// is registered only after they resolve. nil: none.
	AfterReady pulumi.ResourceArrayInput
	// ApplyMode is the apply mode to send; nil: ApplyMode.
	ApplyMode pulumi.StringInput
}

// TalosNode is one node's applied Talos machine configuration.
type TalosNode struct {
	pulumi.ResourceState

	// Endpoint is the node's Talos API address, known once its config is applied.
	Endpoint pulumi.StringOutput `pulumi:"endpoint"`
	// AppliedMode is the apply mode the provider sent: "no_reboot" (live),
	// "staged" (pending until the node reboots) or "auto" (a first config
	// in maintenance mode; under staged_if_needing_reboot also a change
	// Talos applies with a reboot if it needs one).
	AppliedMode pulumi.StringOutput `pulumi:"appliedMode"`

	// Apply is the node's configuration resource.
	Apply *machine.ConfigurationApply
}

// New applies one node's machine configuration. name is the node's logical name.
func New(ctx *pulumi.Context, name string, args *Args, opts ...pulumi.ResourceOption) (*TalosNode, error) {
	n := &TalosNode{}
	if err := ctx.RegisterComponentResource(Type, name, n, opts...); err != nil {
		return nil, err
	}
	// A static address: known in every preview, so the provider can always
	// dry-run the change and staged_if_needing_reboot never falls back to
	// a reboot because the node's address is unknown.
	address := pulumi.String(args.Node.Address.String())
	patches := pulumi.StringArray{}
	for _, p := range args.ExtraPatches {
		patches = append(patches, pulumi.String(p))
	}
	mode := args.ApplyMode
	if mode == nil {
		mode = pulumi.String(ApplyMode)
	}
	applyOpts := []pulumi.ResourceOption{
		pulumi.Parent(n),
		pulumi.AdditionalSecretOutputs(ApplySecretOutputs),
		// After the machines, and one control plane at a time (Args.After).
		pulumi.DependsOn(args.After),
	}
	if args.AfterReady != nil {
		applyOpts = append(applyOpts, pulumi.DependsOnInputs(args.AfterReady))
	}
	apply, err := machine.NewConfigurationApply(ctx, name+"-apply", &machine.ConfigurationApplyArgs{
		ClientConfiguration:       args.ClientConfiguration,
		MachineConfigurationInput: args.MachineConfiguration,
		ConfigPatches:             patches,
		Node:                      address,
		Endpoint:                  address,
		ApplyMode:                 mode,
		// Destroying the resource never wipes the node: its state and data
		// are recovered by replacing the VM, not by resetting Talos.
		OnDestroy: &machine.ConfigurationApplyOnDestroyArgs{
			Reset:    pulumi.Bool(false),
			Graceful: pulumi.Bool(true),
			Reboot:   pulumi.Bool(false),
		},
	}, applyOpts...)
	if err != nil {
		return nil, fmt.Errorf("talosnode %q: apply config: %w", name, err)
	}
	n.Apply = apply
	n.Endpoint = apply.Node
	n.AppliedMode = apply.ResolvedApplyMode

	if err := ctx.RegisterResourceOutputs(n, pulumi.Map{
		"endpoint":    n.Endpoint,
		"appliedMode": n.AppliedMode,
	}); err != nil {
		return nil, err
	}
	return n, nil
}

// Patch renders the node's own config patch: hostname, static address,
// VIP (control planes), install disk and image, the data disk mount, and
// whether control planes take workloads.
func Patch(node Node, args PatchArgs) (string, error) {
	iface := map[string]any{
		"deviceSelector": map[string]any{"hardwareAddr": node.MAC},
		"addresses":      []string{netip.PrefixFrom(node.Address, args.Prefix.Bits()).String()},
		"routes":         []map[string]any{{"network": "0.0.0.0/0", "gateway": args.Gateway.String()}},
	}
	if node.Role == RoleControlPlane && args.VIP.IsValid() {
		iface["vip"] = map[string]any{"ip": args.VIP.String()}
	}
	nameservers := make([]string, 0, len(args.Nameservers))
	for _, ns := range args.Nameservers {
		nameservers = append(nameservers, ns.String())
	}
	network := map[string]any{"interfaces": []any{iface}, "nameservers": nameservers}
	if !args.HostnameDocument {
		network["hostname"] = node.Name
	}
	patch := map[string]any{
		"machine": map[string]any{
			"network": network,
			// install.image is read by an install (a new node booting the
			// boot media) and offered to upgrades; changing it on a running
			// node upgrades nothing (upstream: "The upgrade API call passes a
			// node the installer image to use", docs.siderolabs.com/talos/
			// v1.11/configure-your-talos-cluster/lifecycle-management/upgrading-talos).
			"install": map[string]any{
				"disk":  node.InstallDisk,
				"image": args.InstallImage,
			},
			"disks": []any{map[string]any{
				"device":     node.DataDisk,
				"partitions": []any{map[string]any{"mountpoint": args.DataMountpoint}},
			}},
		},
	}
	if node.Role == RoleControlPlane {
		// cluster.* is a control-plane setting: Talos refuses it on a worker.
		patch["cluster"] = map[string]any{"allowSchedulingOnControlPlanes": args.AllowSchedulingOnControlPlanes}
	}
	// JSON is YAML: Talos takes it as a strategic merge patch.
	b, err := json.Marshal(patch)
	if err != nil || !args.HostnameDocument {
		return string(b), err
	}
	// The generated HostnameConfig says auto: stable; the node's name
	// replaces it (auto and hostname exclude each other).
	h, err := json.Marshal(map[string]any{"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "off", "hostname": node.Name})
	return string(b) + docSeparator + string(h), err
}

// docSeparator joins the documents of a node's own patch.
const docSeparator = "\n---\n"

// PatchHostname reads the hostname a patch from Patch sets: in
// machine.network, or in its HostnameConfig document.
func PatchHostname(patch string) (string, bool) {
	for doc := range strings.SplitSeq(patch, docSeparator) {
		var m struct {
			Kind     string `json:"kind"`
			Hostname string `json:"hostname"`
			Machine  struct {
				Network struct {
					Hostname string `json:"hostname"`
				} `json:"network"`
			} `json:"machine"`
		}
		switch {
		case json.Unmarshal([]byte(doc), &m) != nil:
		case m.Machine.Network.Hostname != "":
			return m.Machine.Network.Hostname, true
		case m.Kind == "HostnameConfig" && m.Hostname != "":
			return m.Hostname, true
		}
	}
	return "", false
}
