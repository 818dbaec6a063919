package stacks

// The first machine config of a Proxmox node goes on its nocloud drive, not
// over the LAN. Talos' nocloud platform reads the drive's user-data as the
// machine config (talos v1.11.5 internal/app/machined/pkg/runtime/v1alpha1/
// platform/nocloud, Nocloud.Configuration), so a new node boots configured
// and never sits in maintenance mode, where the Talos API takes a config
// from anyone, unauthenticated. The Talos layer then applies the same config
// through the authenticated API: the talos provider's apply first probes
// the node without credentials (terraform-provider-talos pkg/talos/util.go,
// talosClientOp: an insecure client's Disks call, which only a node in
// maintenance mode answers) and, refused by a configured node, dials it with
// the cluster's client certificate (client.WithConfig(talosconfig)). So the
// first apply and every later change go over mTLS.

import (
	"fmt"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/stacks/config"
)

// plannedNodes returns what a Proxmox substrate will report of every node,
// from config alone: the guest's disk devices follow the configured bus.
func plannedNodes(cfg *config.Config) []substrate.Node {
	install, data := cfg.Substrate.Proxmox.DiskInterface.Devices()
	out := make([]substrate.Node, 0, len(cfg.Nodes))
	for _, s := range nodeSpecs(cfg) {
		out = append(out, substrate.Node{Name: s.Name, Role: s.Role, Address: s.Address, InstallDisk: install, DataDisk: data})
	}
	return out
}

// firstBootConfigs returns, by node name, the config each node first boots
// with: exactly what its TalosNode applies, i.e. the node's rendered config
// with the other layers' patches applied after its own patch, in the
// apply's order. The talos provider applies an apply's configPatches to
// its machineConfigurationInput with Talos' config patcher
// (terraform-provider-talos pkg/talos/talos_machine_configuration_apply_resource.go),
// and the machine-configuration data source applies its configPatches to
// the generated config with the same patcher (pkg/talos/util.go, generate:
// bundle.WithPatchControlPlane/Worker), so rendering [own, extra...] gives
// the config the apply computes from (rendered [own], extra); with one
// secrets bundle the generator is deterministic (it is a data source
// feeding every plan). tests/prod_nocloud_test.go checks the equality with
// Talos' own machinery. A node without extra patches boots its rendered
// config as is.
func firstBootConfigs(ctx *pulumi.Context, cfg *config.Config, tc *talosConfigs) map[string]pulumi.StringInput {
	out := make(map[string]pulumi.StringInput, len(tc.configs))
	for _, rc := range tc.configs {
		extra := tc.extra[rc.Node.Name]
		if len(extra) == 0 {
			out[rc.Node.Name] = rc.MachineConfiguration
			continue
		}
		out[rc.Node.Name] = renderConfig(ctx, cfg, tc.secrets, rc.Node.Role, append(slices.Clone(rc.Patches), extra...)...)
	}
	return out
}

// checkPlannedNodes reports a substrate whose nodes differ from those the
// first configs were rendered for (plannedNodes): those configs would name
// the wrong disks or addresses.
func checkPlannedNodes(cfg *config.Config, got []substrate.Node) error {
	want := plannedNodes(cfg)
	if len(got) != len(want) {
		return fmt.Errorf("first machine configs: rendered for %d nodes, the substrate made %d", len(want), len(got))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || g.Role != w.Role || g.Address != w.Address || g.InstallDisk != w.InstallDisk || g.DataDisk != w.DataDisk {
			return fmt.Errorf("first machine configs: node %q rendered as %s %s on %s/%s, the substrate made %s %s on %s/%s",
				w.Name, w.Role, w.Address, w.InstallDisk, w.DataDisk, g.Role, g.Address, g.InstallDisk, g.DataDisk)
		}
	}
	return nil
}
