// Package talosnode applies one node's Talos machine configuration in place.
//
// A node is never reset: the configuration is applied with apply mode
// staged_if_needing_reboot, and destroying the resource leaves the machine as
// it is. Logical names created here ("<node>-apply", "<node>-bootstrap") are a
// state contract.
package talosnode

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"

	"github.com/milner/milner/components/substrate"
)

// Type is the type token of the TalosNode component. It is part of every
// child's URN: changing it orphans every node's configuration in state.
const Type = "milner:components:TalosNode"

// ApplyMode is the only apply mode Milner uses: Talos applies a change live
// when it can and stages it for the next reboot when it cannot, so a config
// delta never reboots a node by surprise.
const ApplyMode = "staged_if_needing_reboot"

// DataMountpoint is where the node's persistent data disk is mounted.
const DataMountpoint = "/var/mnt/data"

// Args configures one node's Talos machine configuration.
type Args struct {
	// Node is what the substrate reports of the machine.
	Node substrate.Node
	// MAC selects the node's interface in the network patch.
	MAC string
	// ClusterName is the Kubernetes cluster name.
	ClusterName string
	// ClusterEndpoint is the Kubernetes API URL, e.g. https://10.73.0.240:6443.
	ClusterEndpoint string
	// VIP is the shared control-plane address; set on control planes only.
	VIP netip.Addr
	// Prefix is the node network, giving the address's prefix length.
	Prefix netip.Prefix
	// Gateway is the default route.
	Gateway netip.Addr
	// Nameservers are the DNS servers the node uses.
	Nameservers []netip.Addr
	// TalosVersion selects the machine config format, e.g. v1.9.5.
	TalosVersion string
	// KubernetesVersion is the Kubernetes version, e.g. v1.32.3.
	KubernetesVersion string
	// InstallImage is the Talos installer image.
	InstallImage string
	// MachineSecrets is the cluster's secrets bundle.
	MachineSecrets machine.MachineSecretsInput
	// ClientConfiguration is the talosctl client identity from the secrets bundle.
	ClientConfiguration machine.ClientConfigurationInput
	// Bootstrap makes this node bootstrap etcd. Exactly one node per cluster sets it.
	Bootstrap bool
	// ExtraPatches are JSON strategic-merge patches applied after the
	// node's own patch, in order (e.g. the storage layer's kubelet mounts,
	// node labels and taints for dedicated nodes).
	ExtraPatches []string
}

// TalosNode is one node's applied Talos machine configuration.
type TalosNode struct {
	pulumi.ResourceState

	// Endpoint is the node's Talos API address, known once its config is applied.
	Endpoint pulumi.StringOutput `pulumi:"endpoint"`
	// AppliedMode is the apply mode Talos resolved ("auto" or "staged").
	AppliedMode pulumi.StringOutput `pulumi:"appliedMode"`

	// Apply is the node's configuration resource.
	Apply *machine.ConfigurationApply
	// Bootstrap is the etcd bootstrap, set only on the bootstrap node.
	Bootstrap *machine.Bootstrap
}

// New applies one node's machine configuration, and bootstraps etcd on it
// when args.Bootstrap is set. name is the node's logical name.
func New(ctx *pulumi.Context, name string, args *Args, opts ...pulumi.ResourceOption) (*TalosNode, error) {
	n := &TalosNode{}
	if err := ctx.RegisterComponentResource(Type, name, n, opts...); err != nil {
		return nil, err
	}
	patch, err := Patch(args)
	if err != nil {
		return nil, fmt.Errorf("talosnode %q: patch: %w", name, err)
	}
	cfg := machine.GetConfigurationOutput(ctx, machine.GetConfigurationOutputArgs{
		ClusterName:       pulumi.String(args.ClusterName),
		ClusterEndpoint:   pulumi.String(args.ClusterEndpoint),
		MachineType:       pulumi.String(string(args.Node.Role)),
		MachineSecrets:    args.MachineSecrets,
		TalosVersion:      pulumi.String(args.TalosVersion),
		KubernetesVersion: pulumi.String(args.KubernetesVersion),
		Docs:              pulumi.Bool(false),
		Examples:          pulumi.Bool(false),
	}, pulumi.Parent(n))

	// The address resolves only once the machine exists: the data edge that
	// orders the apply after the VM without a DependsOn.
	address := args.Node.Address.String()
	endpoint := args.Node.MachineID.ApplyT(func(pulumi.ID) string { return address }).(pulumi.StringOutput)

	apply, err := machine.NewConfigurationApply(ctx, name+"-apply", &machine.ConfigurationApplyArgs{
		ClientConfiguration:       args.ClientConfiguration,
		MachineConfigurationInput: cfg.MachineConfiguration(),
		ConfigPatches:             pulumi.ToStringArray(append([]string{patch}, args.ExtraPatches...)),
		Node:                      endpoint,
		Endpoint:                  endpoint,
		ApplyMode:                 pulumi.String(ApplyMode),
		// Destroying the resource never wipes the node: its state and data
		// are recovered by replacing the VM, not by resetting Talos.
		OnDestroy: &machine.ConfigurationApplyOnDestroyArgs{
			Reset:    pulumi.Bool(false),
			Graceful: pulumi.Bool(true),
			Reboot:   pulumi.Bool(false),
		},
	}, pulumi.Parent(n))
	if err != nil {
		return nil, fmt.Errorf("talosnode %q: apply config: %w", name, err)
	}
	n.Apply = apply
	n.Endpoint = apply.Node
	n.AppliedMode = apply.ResolvedApplyMode

	if args.Bootstrap {
		// Node comes from the apply's output: etcd is bootstrapped only after
		// the node holds its configuration.
		n.Bootstrap, err = machine.NewBootstrap(ctx, name+"-bootstrap", &machine.BootstrapArgs{
			ClientConfiguration: args.ClientConfiguration,
			Node:                apply.Node,
			Endpoint:            apply.Endpoint,
		}, pulumi.Parent(n))
		if err != nil {
			return nil, fmt.Errorf("talosnode %q: bootstrap: %w", name, err)
		}
	}

	if err := ctx.RegisterResourceOutputs(n, pulumi.Map{
		"endpoint":    n.Endpoint,
		"appliedMode": n.AppliedMode,
	}); err != nil {
		return nil, err
	}
	return n, nil
}

// Patch renders the node's typed config patch: hostname, static address,
// VIP (control planes), install disk and image, and the data disk mount.
func Patch(args *Args) (string, error) {
	iface := map[string]any{
		"deviceSelector": map[string]any{"hardwareAddr": args.MAC},
		"addresses":      []string{netip.PrefixFrom(args.Node.Address, args.Prefix.Bits()).String()},
		"routes":         []map[string]any{{"network": "0.0.0.0/0", "gateway": args.Gateway.String()}},
	}
	if args.Node.Role == substrate.RoleControlPlane && args.VIP.IsValid() {
		iface["vip"] = map[string]any{"ip": args.VIP.String()}
	}
	nameservers := make([]string, 0, len(args.Nameservers))
	for _, ns := range args.Nameservers {
		nameservers = append(nameservers, ns.String())
	}
	patch := map[string]any{
		"machine": map[string]any{
			"network": map[string]any{
				"hostname":    args.Node.Name,
				"interfaces":  []any{iface},
				"nameservers": nameservers,
			},
			"install": map[string]any{
				"disk":  args.Node.InstallDisk,
				"image": args.InstallImage,
			},
			"disks": []any{map[string]any{
				"device":     args.Node.DataDisk,
				"partitions": []any{map[string]any{"mountpoint": DataMountpoint}},
			}},
		},
	}
	// JSON is YAML: Talos takes it as a strategic merge patch.
	b, err := json.Marshal(patch)
	return string(b), err
}
