package pipeline

import (
	"slices"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
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

// A teardown is refused while the cluster's pool holds a volume the state
// does not (a removal's kept volume); volumes of other pools are not its.
func TestKeptVolumes(t *testing.T) {
	res := []engine.Resource{{Type: gate.TypeLibvirtVolume, ID: "/p/c-cp-1-os.qcow2"}, {Type: gate.TypeLibvirtPool, ID: "uuid"}}
	live := []guard.Object{
		{Type: gate.TypeLibvirtVolume, Name: "c-cp-1-os", Pool: "c-pool", ID: "/p/c-cp-1-os.qcow2"},
		{Type: gate.TypeLibvirtVolume, Name: "c-w-2-os", Pool: "c-pool", ID: "/p/c-w-2-os.qcow2"},
		{Type: gate.TypeLibvirtVolume, Name: "other", Pool: "default", ID: "/var/lib/libvirt/images/other.qcow2"},
	}
	got := keptVolumes("c-pool", "qemu:///system", res, live)
	want := []string{"c-w-2-os: virsh -c qemu:///system vol-delete /p/c-w-2-os.qcow2"}
	if !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
}
