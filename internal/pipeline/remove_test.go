package pipeline

import (
	"slices"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/stacks/config"
)

// A node whose VM the state holds and the config no longer declares is
// refused unless --remove names it; a Proxmox disk holder (the node VMs'
// type, persistent) is no node.
func TestUndeclaredNodes(t *testing.T) {
	cfg := &config.Config{Cluster: config.ClusterConfig{Name: "c"}, Nodes: []config.NodeConfig{{Name: "cp-1"}, {Name: "w-1"}}}
	vm := func(typ, name string) engine.Resource {
		return engine.Resource{Type: typ, URN: resource.URN("urn:pulumi:dev::milner::" + typ + "::" + name)}
	}
	res := []engine.Resource{vm(gate.TypeLibvirtDomain, "c-cp-1"), vm(gate.TypeLibvirtDomain, "c-w-1"), vm(gate.TypeLibvirtDomain, "c-w-2"),
		vm(gate.TypeProxmoxVM, "c-w-3"), vm(gate.TypeProxmoxVM, "c-w-3-disks"), vm(gate.TypeLibvirtVolume, "c-w-4-os")}
	for _, tc := range []struct {
		removed string
		want    []string
	}{
		{"", []string{"w-2", "w-3"}},
		{"w-2", []string{"w-3"}},
		{"w-3", []string{"w-2"}},
	} {
		if got := undeclared(cfg, res, tc.removed); !slices.Equal(got, tc.want) {
			t.Errorf("--remove %q: undeclared %v, want %v", tc.removed, got, tc.want)
		}
	}
}
