package conformance

import (
	"fmt"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/components/talosnode"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/internal/talosconfig"
	"github.com/milner/milner/stacks/config"
)

// TokenGetConfiguration is the talos provider's machine-config generator.
const TokenGetConfiguration = "talos:machine/getConfiguration:getConfiguration"

// PlatformOf is the Talos platform a substrate kind boots: the libvirt boot
// image is metal, the Proxmox one nocloud.
func PlatformOf(k config.Kind) talosconfig.Platform {
	if k == config.KindProxmox {
		return talosconfig.Nocloud
	}
	return talosconfig.Metal
}

// NodeInputs returns, by node (hostname), the input Talos' own generator
// takes for every node config the run asked the provider for: the
// generator's arguments, the patches it was given, then the extra patches of
// the node's apply.
func NodeInputs(ev *Evidence) (map[string]talosconfig.Input, error) {
	out := map[string]talosconfig.Input{}
	for _, inv := range ev.Declared.Invokes {
		if inv.Token != TokenGetConfiguration {
			continue
		}
		in := talosconfig.Input{
			ClusterName:       str(inv.Args["clusterName"]),
			Endpoint:          str(inv.Args["clusterEndpoint"]),
			KubernetesVersion: str(inv.Args["kubernetesVersion"]),
			Contract:          str(inv.Args["talosVersion"]),
			MachineType:       str(inv.Args["machineType"]),
			Patches:           strs(inv.Args["configPatches"]),
			Platform:          PlatformOf(ev.Config.Substrate.Kind),
		}
		host, err := hostname(in.Patches)
		if err != nil {
			return nil, err
		}
		// A Proxmox node's first-boot config (stacks/firstconfig.go) is
		// rendered with the apply's patches already after its own: the
		// same config, so they are not applied twice.
		if apply, ok := offline.Find(ev.Declared.Regs, gate.TypeConfigApply, host+"-apply"); ok {
			if extra := strs(apply.Inputs["configPatches"]); !hasSuffix(in.Patches, extra) {
				in.Patches = append(in.Patches, extra...)
			}
		}
		out[host] = in
	}
	return out, nil
}

// hasSuffix reports whether patches ends with the non-empty suffix.
func hasSuffix(patches, suffix []string) bool {
	return len(suffix) > 0 && len(patches) > len(suffix) && slices.Equal(patches[len(patches)-len(suffix):], suffix)
}

// hostname reads the node's hostname from its own patch (talosnode.Patch).
func hostname(patches []string) (string, error) {
	for _, p := range patches {
		if h, ok := talosnode.PatchHostname(p); ok {
			return h, nil
		}
	}
	return "", fmt.Errorf("a node config without a hostname patch")
}

func str(v resource.PropertyValue) string {
	if v = plain(v); v.IsString() {
		return v.StringValue()
	}
	return ""
}

func strs(v resource.PropertyValue) []string {
	var out []string
	if v = plain(v); v.IsArray() {
		for _, e := range v.ArrayValue() {
			out = append(out, str(e))
		}
	}
	return out
}
