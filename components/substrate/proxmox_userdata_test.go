package substrate

import (
	"github.com/milner/milner/components/vocab"
	"net/netip"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/offline"
)

// TestProxmoxUserDataGoesThroughTheNocloudDrive: a node given user data
// gets a secret snippet on its own host, whose content is ignored after
// creation, and its node VM's nocloud drive points at it; a node without
// user data gets neither.
func TestProxmoxUserDataGoesThroughTheNocloudDrive(t *testing.T) {
	node := func(name, host string, vmid int) NodeSpec {
		return NodeSpec{Name: name, Role: vocab.RoleControlPlane, VCPU: 2, MemoryMiB: 2048, OSDiskGiB: 20, DataDiskGiB: 20,
			Address: netip.MustParseAddr("192.168.1.50"), MAC: "bc:24:11:00:00:01", VMID: vmid, Host: host}
	}
	rec, err := offline.Run(func(ctx *pulumi.Context) error {
		_, err := NewProxmox(ctx, "c", &ProxmoxArgs{
			Endpoint: "https://pve-1:8006/", APIToken: pulumi.String("a@pve!b=c"), NodeName: "pve-1",
			OSDatastore: "local-lvm", DataDatastore: "local-lvm", ImageDatastore: "local", Bridge: "vmbr0",
			DiskInterface: vocab.DiskVirtio, ImageURL: "https://factory.talos.dev/x/nocloud-amd64.qcow2", TalosVersion: "v1.9.5",
			Prefix: netip.MustParsePrefix("192.168.1.0/24"), Gateway: netip.MustParseAddr("192.168.1.1"),
			Nodes:             []NodeSpec{node("cp-1", "pve-1", 150), node("cp-2", "pve-2", 151)},
			UserData:          map[string]pulumi.StringInput{"cp-2": pulumi.String("version: v1alpha1\n")},
			SnippetsDatastore: "snippets",
			SSH:               &ProxmoxSSH{Username: "root", Agent: true},
		})
		return err
	}, "t", map[string]string{})
	require.NoError(t, err)

	files := rec.ByType("proxmoxve:Storage/file:File")
	require.Len(t, files, 1)
	f := files[0]
	assert.Equal(t, "c-cp-2-userdata", f.Name)
	assert.Equal(t, "pve-2", f.Inputs["nodeName"].StringValue(), "the snippet is on the node's host")
	assert.Equal(t, "snippets", f.Inputs["contentType"].StringValue())
	raw := f.Inputs["sourceRaw"].ObjectValue()
	assert.True(t, raw["data"].IsSecret(), "the machine config is a secret")
	assert.Equal(t, []string{"sourceRaw", "fileMode"}, f.Options.IgnoreChanges, "only the first config goes this way; its mode is set at creation")
	assert.Equal(t, "0600", f.Inputs["fileMode"].StringValue(), "the snippet holds the CA keys: owner-only")
	assert.True(t, f.Options.RetainOnDelete, "PVE reads the file at every VM start: never deleted by a plan")

	vm2, ok := rec.ByName("proxmoxve:VM/virtualMachine:VirtualMachine", "c-cp-2")
	require.True(t, ok)
	assert.Equal(t, "c-cp-2-userdata-id", vm2.Inputs["initialization"].ObjectValue()["userDataFileId"].StringValue())
	vm1, ok := rec.ByName("proxmoxve:VM/virtualMachine:VirtualMachine", "c-cp-1")
	require.True(t, ok)
	assert.NotContains(t, vm1.Inputs["initialization"].ObjectValue(), "userDataFileId")
}
