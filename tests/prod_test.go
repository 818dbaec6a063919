package tests

// Whole-program tests of the prod stack: the committed Pulumi.prod.yaml run
// through stacks.Program under the recording mock. Helpers here are
// prefixed "prod" so they never collide with the dev tests' helpers.

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/components/helmapp"
	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/components/talosnode"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/tests/offlinetest"
)

// Type tokens of the prod substrate.
const (
	prodTVM       = "proxmoxve:VM/virtualMachine:VirtualMachine"
	prodTImage    = "proxmoxve:Download/file:File"
	prodTProvider = "pulumi:providers:proxmoxve"
	prodTSnippet  = "proxmoxve:Storage/file:File"
)

// prodSecrets are the secret keys the prod stack needs, with test values:
// the apps' (devSecrets) and the Proxmox API token.
var prodSecrets = func() map[string]string {
	m := maps.Clone(devSecrets)
	m["milner:proxmoxApiToken"] = "milner@pve!pulumi=3f0c9b1e-6a2d-4c8e-9f71-0d5b2a4e8c13"
	return m
}()

// prodNodes are the committed prod nodes: name, VM id, address, PVE host.
var prodNodes = []struct {
	name    string
	vmID    int
	address string
	host    string
}{
	{"cp-1", 150, "192.168.1.50", "pve-1"},
	{"cp-2", 151, "192.168.1.51", "pve-2"},
	{"cp-3", 152, "192.168.1.52", "pve-3"},
}

// prodNames returns the logical names of regs.
func prodNames(regs []offline.Registration) []string {
	out := []string{}
	for _, r := range regs {
		out = append(out, r.Name)
	}
	return out
}

// prodVM returns the registration of one Proxmox VM by logical name.
func prodVM(t testing.TB, rec *offline.Recorder, name string) offline.Registration {
	t.Helper()
	r, ok := rec.ByName(prodTVM, name)
	require.True(t, ok, "no VM %q", name)
	return r
}

// prodDisks returns a VM registration's disks.
func prodDisks(t testing.TB, r offline.Registration) []resource.PropertyMap {
	t.Helper()
	var out []resource.PropertyMap
	for _, d := range r.Inputs["disks"].ArrayValue() {
		out = append(out, d.ObjectValue())
	}
	return out
}

func TestProdCountsPerType(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	assert.Equal(t, map[string]int{
		substrate.ProxmoxType:           1,
		prodTProvider:                   1,
		prodTImage:                      3, // one per host
		prodTVM:                         6, // (holder, node) x 3
		prodTSnippet:                    3, // each node's first machine config
		"talos:machine/secrets:Secrets": 1,
		talosnode.Type:                  3,
		"talos:machine/configurationApply:ConfigurationApply": 3,
		"talos:machine/bootstrap:Bootstrap":                   1,
		"talos:cluster/kubeconfig:Kubeconfig":                 1,
		"pulumi:providers:kubernetes":                         1,
		helmapp.Type:                                          4,
		"kubernetes:helm.sh/v3:Release":                       4,
		"kubernetes:metallb.io/v1beta1:IPAddressPool":         1,
		"kubernetes:metallb.io/v1beta1:L2Advertisement":       1,
		tNamespace:                    5,
		tSecret:                       3,
		tStorageClass:                 1,
		"milner:components:Workloads": 1,
		tQuota:                        1,
		tLimitRange:                   1,
		tPriorityClass:                1,
	}, offlinetest.Counts(rec))
}

func TestProdLogicalNames(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	v := stackCluster(t, "prod").TalosVersion
	for token, want := range map[string][]string{
		substrate.ProxmoxType: {"milner-prod"},
		prodTProvider:         {"milner-prod-proxmox"},
		prodTImage:            {"milner-prod-pve-1-image-" + v, "milner-prod-pve-2-image-" + v, "milner-prod-pve-3-image-" + v},
		prodTVM: {
			"milner-prod-cp-1", "milner-prod-cp-1-disks",
			"milner-prod-cp-2", "milner-prod-cp-2-disks",
			"milner-prod-cp-3", "milner-prod-cp-3-disks",
		},
		talosnode.Type: {"cp-1", "cp-2", "cp-3"},
		helmapp.Type:   {"local-path-provisioner", "metallb", "vault", "woodpecker"},
	} {
		assert.Equal(t, want, prodNames(rec.ByType(token)), token)
	}
	// Proxmox-side names and ids are a contract with the host too.
	for _, n := range prodNodes {
		node := prodVM(t, rec, "milner-prod-"+n.name)
		holder := prodVM(t, rec, "milner-prod-"+n.name+"-disks")
		assert.Equal(t, "milner-prod-"+n.name, node.Inputs["name"].StringValue())
		assert.Equal(t, float64(n.vmID), node.Inputs["vmId"].NumberValue())
		assert.Equal(t, "milner-prod-"+n.name+"-disks", holder.Inputs["name"].StringValue())
		assert.Equal(t, float64(n.vmID+1000), holder.Inputs["vmId"].NumberValue())
	}
}

func TestProdTypeTokenIsPinned(t *testing.T) {
	assert.Equal(t, "milner:components:ProxmoxSubstrate", substrate.ProxmoxType)
}

// TestProdAndDevSubstratesDoNotMix runs both committed stacks: prod declares
// no libvirt resource and dev no Proxmox one.
func TestProdAndDevSubstratesDoNotMix(t *testing.T) {
	prod := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	dev := runStack(t, "dev", stackConfig(t, "dev", prodSecrets))
	for _, r := range prod.Registrations() {
		assert.NotContains(t, strings.ToLower(r.Type), "libvirt", "prod registered %s %s", r.Type, r.Name)
	}
	for _, r := range dev.Registrations() {
		assert.NotContains(t, strings.ToLower(r.Type), "proxmox", "dev registered %s %s", r.Type, r.Name)
	}
	assert.NotEmpty(t, prod.ByType(prodTVM))
	assert.NotEmpty(t, dev.ByType(substrate.LibvirtType))
}

// prodLayerShape is what must match between stacks for one Talos or Helm
// registration: its type, name, parent and options, and its input keys, with
// the cluster name and stack taken out.
type prodLayerShape struct {
	Type, Name, Parent, Provider string
	Custom                       bool
	Options                      offline.Options
	InputKeys                    []string
}

// prodLayerShapes returns the shapes of every registration outside the
// substrate (the Talos and Helm layers), in a stable order.
func prodLayerShapes(rec *offline.Recorder, cluster string) []prodLayerShape {
	// urn:pulumi:<stack>::<project>::<type chain>::<name> -> <type chain>::<name>
	norm := func(urn string) string {
		if parts := strings.SplitN(urn, "::", 3); len(parts) == 3 {
			urn = parts[2]
		}
		return strings.ReplaceAll(urn, cluster, "<cluster>")
	}
	var out []prodLayerShape
	for _, r := range rec.Registrations() {
		if strings.HasPrefix(r.Type, "proxmoxve:") || strings.HasPrefix(r.Type, "libvirt:") ||
			r.Type == prodTProvider || r.Type == "pulumi:providers:libvirt" ||
			r.Type == substrate.ProxmoxType || r.Type == substrate.LibvirtType {
			continue
		}
		opts := r.Options
		// Dependencies name substrate URNs, which differ by design; the
		// data edges themselves are the same inputs (MachineID).
		opts.Dependencies = nil
		keys := slices.Sorted(maps.Keys(r.Inputs.Mappable()))
		out = append(out, prodLayerShape{
			Type: r.Type, Name: strings.ReplaceAll(r.Name, cluster, "<cluster>"),
			Parent: norm(r.Parent), Provider: norm(r.Provider),
			Custom: r.Custom, Options: opts, InputKeys: keys,
		})
	}
	return out
}

// prodInvokeTokens counts invokes per token.
func prodInvokeTokens(rec *offline.Recorder) map[string]int {
	out := map[string]int{}
	for _, inv := range rec.Invokes() {
		out[inv.Token]++
	}
	return out
}

// TestProdTalosAndHelmLayersMatchDev compares the two committed stacks' runs:
// the Talos and Helm layers are the same components, with the same names,
// parents, options and input keys, so dev exercises what prod runs.
func TestProdTalosAndHelmLayersMatchDev(t *testing.T) {
	prod := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	dev := runStack(t, "dev", stackConfig(t, "dev", prodSecrets))
	p, d := prodLayerShapes(prod, "milner-prod"), prodLayerShapes(dev, "milner-dev")
	require.NotEmpty(t, p)
	assert.Equal(t, d, p)
	// Prod renders one more config per node: the config it first boots from
	// its nocloud drive, the rendered config with the other layers' patches
	// (stacks/firstconfig.go); every node of both stacks has such patches.
	want := prodInvokeTokens(dev)
	want["talos:machine/getConfiguration:getConfiguration"] += len(prodNodes)
	assert.Equal(t, want, prodInvokeTokens(prod))
	// Sanity: the comparison does cover both layers.
	var types []string
	for _, s := range p {
		types = append(types, s.Type)
	}
	assert.Contains(t, types, talosnode.Type)
	assert.Contains(t, types, "talos:machine/configurationApply:ConfigurationApply")
	assert.Contains(t, types, helmapp.Type)
	assert.Contains(t, types, "kubernetes:helm.sh/v3:Release")
}

func TestProdProtectRetainAndReplacePolicy(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	holders, nodes := map[string]bool{}, map[string]bool{}
	for _, n := range prodNodes {
		holders["milner-prod-"+n.name+"-disks"] = true
		nodes["milner-prod-"+n.name] = true
	}
	for _, r := range rec.Registrations() {
		isNode := r.Type == prodTVM && nodes[r.Name]
		if isNode {
			assert.Equal(t, []string{"*"}, r.Options.ReplaceOnChanges, r.Name)
			assert.True(t, r.Options.DeleteBeforeReplace, r.Name)
			assert.False(t, r.Options.Protect, "the node VM is the disposable resource: %s", r.Name)
			assert.Equal(t, substrate.ProxmoxNodeIgnoredChanges, r.Options.IgnoreChanges, "a node VM created by Milner ignores only ProxmoxNodeIgnoredChanges: %s", r.Name)
		} else {
			assert.Empty(t, r.Options.ReplaceOnChanges, "only node VMs may carry replaceOnChanges: %s %s", r.Type, r.Name)
			assert.False(t, r.Options.DeleteBeforeReplace, "only node VMs may delete before replace: %s %s", r.Type, r.Name)
		}
	}
	for name := range holders {
		h := prodVM(t, rec, name)
		assert.True(t, h.Options.Protect, "holder %s must be protected", name)
		assert.Equal(t, substrate.ProxmoxHolderIgnoredChanges, h.Options.IgnoreChanges, "holder %s created by Milner ignores only ProxmoxHolderIgnoredChanges", name)
		assert.True(t, h.Inputs["protection"].BoolValue(), "holder %s carries Proxmox's own protection flag", name)
		assert.False(t, h.Inputs["started"].BoolValue(), "holder %s is never started", name)
		assert.False(t, h.Inputs["onBoot"].BoolValue(), "holder %s is never started", name)
	}
	images := rec.ByType(prodTImage)
	require.Len(t, images, 3)
	for _, img := range images {
		assert.True(t, img.Options.RetainOnDelete, "boot image %s is kept on the datastore", img.Name)
		assert.Equal(t, "import", img.Inputs["contentType"].StringValue())
		assert.False(t, img.Inputs["overwrite"].BoolValue(), "never re-download an image in use")
		assert.True(t, img.Inputs["overwriteUnmanaged"].BoolValue(), "this cluster's image left on the host (teardown, lost state) is downloaded again, not refused")
		assert.Contains(t, img.Options.IgnoreChanges, "overwriteUnmanaged", "images created before overwriteUnmanaged plan no update")
	}
}

func TestProdProviderAndParents(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	provs := rec.ByType(prodTProvider)
	require.Len(t, provs, 1)
	prov := provs[0]
	assert.Equal(t, "https://pve-1.home.arpa:8006/", prov.Inputs["endpoint"].StringValue())
	assert.True(t, prov.Inputs["apiToken"].IsSecret(), "the API token reaches the provider as a secret")
	for _, r := range append(append(rec.ByType(prodTVM), rec.ByType(prodTImage)...), prov) {
		assert.True(t, strings.HasSuffix(r.Parent, substrate.ProxmoxType+"::milner-prod"), "%s %s has parent %s", r.Type, r.Name, r.Parent)
	}
	for _, r := range append(rec.ByType(prodTVM), rec.ByType(prodTImage)...) {
		assert.Contains(t, r.Provider, "::milner-prod-proxmox::", "%s uses the explicit provider", r.Name)
	}
}

// TestProdNodeAttachesHolderDisksByPath: the OS and data disks are the
// holder's, and the node VM only attaches them, by the paths Proxmox gave them.
func TestProdNodeAttachesHolderDisksByPath(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	for _, n := range prodNodes {
		holder := prodVM(t, rec, "milner-prod-"+n.name+"-disks")
		node := prodVM(t, rec, "milner-prod-"+n.name)
		hd, nd := prodDisks(t, holder), prodDisks(t, node)
		require.Len(t, hd, 2, "the holder owns the OS and the data disk")
		require.Len(t, nd, 2, "the node VM attaches both")

		assert.Equal(t, "milner-prod-"+n.host+"-image-"+stackCluster(t, "prod").TalosVersion+"-id", hd[0]["importFrom"].StringValue(), "the OS disk is imported from its host's image")
		assert.Equal(t, 64.0, hd[0]["size"].NumberValue())
		assert.NotContains(t, hd[1], resource.PropertyKey("importFrom"), "the data disk starts empty")
		assert.Equal(t, 128.0, hd[1]["size"].NumberValue())
		for i := range hd {
			assert.NotContains(t, hd[i], resource.PropertyKey("pathInDatastore"), "the holder creates its disks")
			assert.Equal(t, "local-lvm", hd[i]["datastoreId"].StringValue())

			d := nd[i]
			assert.Equal(t, fmt.Sprintf("virtio%d", i), d["interface"].StringValue())
			assert.Equal(t, fmt.Sprintf("vm-%d-disk-%d", n.vmID+1000, i), d["pathInDatastore"].StringValue(), "%s disk %d", n.name, i)
			for _, k := range []resource.PropertyKey{"datastoreId", "fileFormat", "size"} {
				assert.Equal(t, hd[i][k], d[k], "%s disk %d: %s comes from the holder", n.name, i, k)
			}
			assert.NotContains(t, d, resource.PropertyKey("importFrom"), "the node VM creates no disk")
		}
		// A data edge, not a DependsOn: the paths are the holder's outputs.
		assert.True(t, slices.ContainsFunc(node.Options.Dependencies, func(u string) bool {
			return strings.HasSuffix(u, "::"+holder.Name)
		}), "%s depends on its holder through the attached disks", node.Name)
	}
}

// TestProdStaticAddressing: the node's first-boot address (nocloud drive)
// and its machine config agree, with no DHCP.
func TestProdStaticAddressing(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	for _, n := range prodNodes {
		node := prodVM(t, rec, "milner-prod-"+n.name)
		init := node.Inputs["initialization"].ObjectValue()
		ip := init["ipConfigs"].ArrayValue()
		require.Len(t, ip, 1, n.name)
		v4 := ip[0].ObjectValue()["ipv4"].ObjectValue()
		assert.Equal(t, n.address+"/24", v4["address"].StringValue(), n.name)
		assert.Equal(t, "192.168.1.1", v4["gateway"].StringValue(), n.name)
		assert.Equal(t, []resource.PropertyValue{resource.NewProperty("192.168.1.1")},
			init["dns"].ObjectValue()["servers"].ArrayValue(), n.name)
		nic := node.Inputs["networkDevices"].ArrayValue()
		require.Len(t, nic, 1)
		assert.Equal(t, "vmbr0", nic[0].ObjectValue()["bridge"].StringValue())

		patch := nodePatch(t, rec, n.name)
		iface := patch.Machine.Network.Interfaces
		require.Len(t, iface, 1)
		assert.Equal(t, []string{n.address + "/24"}, iface[0].Addresses, n.name)
		assert.Equal(t, "192.168.1.60", iface[0].VIP["ip"], "control planes announce the VIP")
		assert.Equal(t, strings.ToLower(nic[0].ObjectValue()["macAddress"].StringValue()), iface[0].DeviceSelector["hardwareAddr"],
			"the patch selects the VM's own NIC")
	}
}

// talosPatch is the part of a node's Talos patch the tests read.
type talosPatch struct {
	Machine struct {
		Network struct {
			Hostname   string `json:"hostname"`
			Interfaces []struct {
				DeviceSelector map[string]string `json:"deviceSelector"`
				Addresses      []string          `json:"addresses"`
				VIP            map[string]string `json:"vip"`
			} `json:"interfaces"`
		} `json:"network"`
		Install map[string]string `json:"install"`
		Disks   []struct {
			Device string `json:"device"`
		} `json:"disks"`
	} `json:"machine"`
}

// prodPatch decodes the Talos config patch of one node.
func nodePatch(t testing.TB, rec *offline.Recorder, node string) talosPatch {
	t.Helper()
	var p talosPatch
	require.NoError(t, json.Unmarshal([]byte(nodeConfigInvoke(t, rec, node).Patches[0]), &p))
	return p
}

// TestProdInstallDiskMatchesInterface: Talos installs to the device the
// chosen bus gives the OS disk, and mounts the attached data disk.
func TestProdInstallDiskMatchesInterface(t *testing.T) {
	for _, tc := range []struct {
		iface, install, data string
	}{
		{"virtio", "/dev/vda", "/dev/vdb"},
		{"scsi", "/dev/sda", "/dev/sdb"},
		{"sata", "/dev/sda", "/dev/sdb"},
	} {
		t.Run(tc.iface, func(t *testing.T) {
			cfg := patchKey(t, stackConfig(t, "prod", prodSecrets), "milner:substrate", func(v any) {
				v.(map[string]any)["proxmox"].(map[string]any)["diskInterface"] = tc.iface
			})
			rec := runStack(t, "prod", cfg)
			disks := prodDisks(t, prodVM(t, rec, "milner-prod-cp-1"))
			require.Len(t, disks, 2)
			assert.Equal(t, tc.iface+"0", disks[0]["interface"].StringValue())
			assert.Equal(t, tc.iface+"1", disks[1]["interface"].StringValue())
			assert.Equal(t, []resource.PropertyValue{resource.NewProperty(tc.iface + "0")},
				prodVM(t, rec, "milner-prod-cp-1").Inputs["bootOrders"].ArrayValue())
			p := nodePatch(t, rec, "cp-1")
			assert.Equal(t, tc.install, p.Machine.Install["disk"])
			require.Len(t, p.Machine.Disks, 1)
			assert.Equal(t, tc.data, p.Machine.Disks[0].Device)
			// The holder's own slots do not follow the bus: a bus change never touches it.
			hd := prodDisks(t, prodVM(t, rec, "milner-prod-cp-1-disks"))
			require.Len(t, hd, 2)
			assert.Equal(t, []string{"scsi0", "scsi1"}, []string{hd[0]["interface"].StringValue(), hd[1]["interface"].StringValue()})
		})
	}
}

// prodWithoutPaths returns a deep copy of in without the given property
// paths (e.g. "disks[0].importFrom"): what the engine diffs when they are
// ignored.
func prodWithoutPaths(t testing.TB, in resource.PropertyMap, paths []string) resource.PropertyMap {
	t.Helper()
	out := resource.NewPropertyMapFromMap(in.Mappable())
	for _, p := range paths {
		path, err := resource.ParsePropertyPath(p)
		require.NoError(t, err, p)
		require.True(t, path.Delete(resource.NewProperty(out)), "%s is not an input path", p)
	}
	return out
}

// TestProdTalosVersionBumpReplacesNoVMOrDisk: a version bump adds an image
// and changes no VM input the engine would act on.
func TestProdTalosVersionBumpReplacesNoVMOrDisk(t *testing.T) {
	base := stackConfig(t, "prod", prodSecrets)
	from := stackCluster(t, "prod").TalosVersion
	to := nextPatch(t, from)
	bumped := patchKey(t, base, "milner:cluster", func(v any) { v.(map[string]any)["talosVersion"] = to })
	before, after := runStack(t, "prod", base), runStack(t, "prod", bumped)

	assert.Equal(t, []string{"milner-prod-pve-1-image-" + from, "milner-prod-pve-2-image-" + from, "milner-prod-pve-3-image-" + from}, prodNames(before.ByType(prodTImage)))
	assert.Equal(t, []string{"milner-prod-pve-1-image-" + to, "milner-prod-pve-2-image-" + to, "milner-prod-pve-3-image-" + to}, prodNames(after.ByType(prodTImage)), "a bump adds new images")
	for _, img := range after.ByType(prodTImage) {
		assert.True(t, img.Options.RetainOnDelete, img.Name)
	}

	require.Equal(t, prodNames(before.ByType(prodTVM)), prodNames(after.ByType(prodTVM)), "the same VMs")
	changed := 0
	for _, b := range before.ByType(prodTVM) {
		a := prodVM(t, after, b.Name)
		require.Equal(t, b.Options.IgnoreChanges, a.Options.IgnoreChanges, b.Name)
		if !b.Inputs.DeepEquals(a.Inputs) {
			changed++
		}
		assert.True(t, prodWithoutPaths(t, b.Inputs, b.Options.IgnoreChanges).DeepEquals(prodWithoutPaths(t, a.Inputs, a.Options.IgnoreChanges)),
			"%s: a Talos version bump must change no input outside ignoreChanges %v", b.Name, b.Options.IgnoreChanges)
	}
	// The check is not vacuous: the holders' image input did move, and only it.
	assert.Equal(t, len(prodNodes), changed, "every holder's (ignored) image input follows the version")
}

// TestProdAdoptedNodeIsImported: adoptId imports the existing node VM under
// the provider's "<proxmox node>/<vm id>" id; nothing else is imported.
func TestProdAdoptedNodeIsImported(t *testing.T) {
	cfg := patchKey(t, stackConfig(t, "prod", prodSecrets), "milner:nodes", func(v any) {
		v.([]any)[1].(map[string]any)["adoptId"] = strconv.Itoa(prodNodes[1].vmID)
	})
	rec := runStack(t, "prod", cfg)
	for _, r := range rec.Registrations() {
		want := ""
		if r.Type == prodTVM && r.Name == "milner-prod-cp-2" {
			want = "pve-2/151"
		}
		assert.Equal(t, want, r.Options.ImportID, "%s %s", r.Type, r.Name)
	}
}
