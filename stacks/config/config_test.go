package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
)

// obj, baseConfig, raw and at are the shared fixtures (see configtest).
type obj = configtest.Obj

var (
	baseConfig = configtest.Base
	raw        = configtest.Raw
	at         = configtest.At
)

func TestBaseConfigIsValid(t *testing.T) {
	_, err := configtest.Load(raw(t, baseConfig()), "milner:vaultToken")
	require.NoError(t, err)
}

func TestDefaults(t *testing.T) {
	cfg, err := config.Load(mapSource(raw(t, baseConfig())))
	require.NoError(t, err)
	n := cfg.Nodes[0]
	assert.Equal(t, []int{config.DefaultVCPU, config.DefaultMemoryMiB, config.DefaultOSDiskGiB, config.DefaultDataDiskGiB},
		[]int{n.VCPU, n.MemoryMiB, n.OSDiskGiB, n.DataDiskGiB})
	assert.Equal(t, config.LayerApps, cfg.StopAfter)
	assert.Equal(t, "qemu:///system", cfg.Substrate.Libvirt.URI)
	assert.Equal(t, "/var/lib/libvirt/images/t", cfg.Substrate.Libvirt.PoolPath)
	assert.Equal(t, "10.9.0.1", cfg.Network.GatewayAddr.String())
	assert.Equal(t, "https://10.9.0.240:6443", cfg.Endpoint())
	assert.Equal(t, "ghcr.io/siderolabs/installer:v1.9.5", cfg.Cluster.InstallImage)
	assert.Equal(t, "vault", cfg.Apps[0].ReleaseName)
	assert.Equal(t, "vault", cfg.Apps[0].Namespace)
}

// mapSource is a ConfigSource over raw values.
type mapSource map[string]string

func (m mapSource) GetConfig(k string) (string, bool) { v, ok := m[k]; return v, ok }

// IsConfigSecret treats every key ending in "Token" as secret, as the tests set them.
func (m mapSource) IsConfigSecret(k string) bool { return strings.HasSuffix(k, "Token") }

func TestBadConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c obj)
		want string // the config path and the gist of the message
	}{
		{"missing cluster", func(c obj) { delete(c, "cluster") }, "milner:cluster: is required"},
		{"unknown cluster key", func(c obj) { at(c, "cluster")["clusterName"] = "x" }, `milner:cluster: unknown key "clusterName"`},
		{"unknown node field", func(c obj) { at(c, "nodes", 2)["memroyMiB"] = 4096 }, `milner:nodes[2]: unknown key "memroyMiB"`},
		{"wrong node field type", func(c obj) { at(c, "nodes", 1)["vcpu"] = "four" }, "milner:nodes[1]: vcpu: want int, got string"},
		{"bad cluster name", func(c obj) { at(c, "cluster")["name"] = "My_Cluster" }, "milner:cluster.name:"},
		{"talos version range", func(c obj) { at(c, "cluster")["talosVersion"] = "v1.9" }, "milner:cluster.talosVersion:"},
		{"talos version without v", func(c obj) { at(c, "cluster")["talosVersion"] = "1.9.5" }, "milner:cluster.talosVersion:"},
		{"kubernetes version", func(c obj) { at(c, "cluster")["kubernetesVersion"] = "latest" }, "milner:cluster.kubernetesVersion:"},
		{"vip not an address", func(c obj) { at(c, "cluster")["vip"] = "10.9.0" }, "milner:cluster.vip:"},
		{"vip outside network", func(c obj) { at(c, "cluster")["vip"] = "10.8.0.240" }, "milner:cluster.vip: 10.8.0.240 is outside the node network"},
		{"vip inside dhcp range", func(c obj) { at(c, "cluster")["vip"] = "10.9.0.150" }, "milner:cluster.vip: 10.9.0.150 is inside the DHCP range"},
		{"vip inside lb range", func(c obj) { at(c, "cluster")["vip"] = "10.9.0.245" }, "milner:cluster.vip: 10.9.0.245 is inside the load-balancer vipRange"},
		{"vip is a node", func(c obj) { at(c, "cluster")["vip"] = "10.9.0.12" }, "milner:nodes[1].address: 10.9.0.12 is the cluster VIP"},
		{"endpoint not https", func(c obj) { at(c, "cluster")["endpoint"] = "http://x:6443" }, "milner:cluster.endpoint:"},
		{"unknown substrate", func(c obj) { at(c, "substrate")["kind"] = "vmware" }, `milner:substrate.kind: unknown substrate "vmware"`},
		{"libvirt section missing", func(c obj) { delete(at(c, "substrate"), "libvirt") }, "milner:substrate.libvirt: is required for kind libvirt"},
		{"unknown domain type", func(c obj) { at(c, "substrate", "libvirt")["domainType"] = "xen" }, "milner:substrate.libvirt.domainType:"},
		{"relative pool path", func(c obj) { at(c, "substrate", "libvirt")["poolPath"] = "pools/t" }, "milner:substrate.libvirt.poolPath:"},
		{"bad libvirt uri", func(c obj) { at(c, "substrate", "libvirt")["uri"] = "qemu" }, "milner:substrate.libvirt.uri:"},
		{"unknown network mode", func(c obj) { at(c, "network")["mode"] = "bridge" }, `milner:network.mode: unknown network mode "bridge"`},
		{"bad cidr", func(c obj) { at(c, "network")["cidr"] = "10.9.0.1/24" }, "milner:network.cidr:"},
		{"cidr too small", func(c obj) { at(c, "network")["cidr"] = "10.9.0.0/30" }, "milner:network.cidr:"},
		{"gateway outside", func(c obj) { at(c, "network")["gateway"] = "10.10.0.1" }, "milner:network.gateway: 10.10.0.1 is outside"},
		{"dhcp range reversed", func(c obj) { at(c, "network", "dhcpRange")["start"] = "10.9.0.200" }, "milner:network.dhcpRange: start 10.9.0.200 is after end"},
		{"vip range overlaps dhcp", func(c obj) { at(c, "network", "vipRange")["start"] = "10.9.0.190" }, "milner:network.vipRange: overlaps dhcpRange"},
		{"bad nameserver", func(c obj) { at(c, "network")["nameservers"] = []any{"dns.lan"} }, "milner:network.nameservers[0]:"},
		{"no nodes", func(c obj) { c["nodes"] = []any{} }, "milner:nodes: at least one node is required"},
		{"no control plane", func(c obj) {
			for i := range 3 {
				at(c, "nodes", i)["role"] = "worker"
			}
		}, "milner:nodes: no node has role controlplane"},
		{"unknown role", func(c obj) { at(c, "nodes", 3)["role"] = "master" }, `milner:nodes[3].role: unknown role "master"`},
		{"duplicate node name", func(c obj) { at(c, "nodes", 2)["name"] = "cp-1" }, `milner:nodes[2].name: "cp-1" is also the name of nodes[0]`},
		{"node name not a label", func(c obj) { at(c, "nodes", 0)["name"] = "CP 1" }, "milner:nodes[0].name:"},
		{"duplicate address", func(c obj) { at(c, "nodes", 3)["address"] = "10.9.0.11" }, "milner:nodes[3].address: 10.9.0.11 is also the address of nodes[0]"},
		{"address outside network", func(c obj) { at(c, "nodes", 1)["address"] = "192.168.1.5" }, "milner:nodes[1].address: 192.168.1.5 is outside the node network"},
		{"address is broadcast", func(c obj) { at(c, "nodes", 1)["address"] = "10.9.0.255" }, "milner:nodes[1].address: 10.9.0.255 is the network or broadcast address"},
		{"address is gateway", func(c obj) { at(c, "nodes", 1)["address"] = "10.9.0.1" }, "milner:nodes[1].address: 10.9.0.1 is the gateway"},
		{"address in dhcp range", func(c obj) { at(c, "nodes", 3)["address"] = "10.9.0.120" }, "milner:nodes[3].address: 10.9.0.120 is inside the DHCP range"},
		{"address in vip range", func(c obj) { at(c, "nodes", 3)["address"] = "10.9.0.242" }, "milner:nodes[3].address: 10.9.0.242 is inside the vipRange"},
		{"duplicate mac", func(c obj) { at(c, "nodes", 1)["mac"] = "52:54:00:09:00:11" }, "milner:nodes[1].mac: 52:54:00:09:00:11 is also the MAC of nodes[0]"},
		{"duplicate mac other case", func(c obj) {
			at(c, "nodes", 1)["mac"] = "52:54:00:09:00:1A"
			at(c, "nodes", 2)["mac"] = "52:54:00:09:00:1a"
		}, "milner:nodes[2].mac: 52:54:00:09:00:1a is also the MAC of nodes[1]"},
		{"bad mac", func(c obj) { at(c, "nodes", 0)["mac"] = "52:54:00:09:00" }, "milner:nodes[0].mac:"},
		{"multicast mac", func(c obj) { at(c, "nodes", 0)["mac"] = "01:00:5e:00:00:01" }, "milner:nodes[0].mac: 01:00:5e:00:00:01 is a multicast address"},
		{"memory below talos minimum", func(c obj) { at(c, "nodes", 2)["memoryMiB"] = 512 }, "milner:nodes[2].memoryMiB: 512 is below the Talos minimum of 2048"},
		{"worker memory below minimum", func(c obj) { at(c, "nodes", 3)["memoryMiB"] = 512 }, "milner:nodes[3].memoryMiB: 512 is below the Talos minimum of 1024"},
		{"memory above maximum", func(c obj) { at(c, "nodes", 0)["memoryMiB"] = 1 << 20 }, "milner:nodes[0].memoryMiB: 1048576 is above the maximum"},
		{"negative vcpu", func(c obj) { at(c, "nodes", 0)["vcpu"] = -1 }, "milner:nodes[0].vcpu: -1 is outside 1..64"},
		{"os disk too small", func(c obj) { at(c, "nodes", 0)["osDiskGiB"] = 4 }, "milner:nodes[0].osDiskGiB: 4 is outside 10..4096"},
		{"data disk too large", func(c obj) { at(c, "nodes", 0)["dataDiskGiB"] = 1 << 20 }, "milner:nodes[0].dataDiskGiB:"},
		{"vm id on libvirt", func(c obj) { at(c, "nodes", 0)["vmId"] = 101 }, "milner:nodes[0].vmId: is only for substrate kind proxmox"},
		{"adopt id not a uuid", func(c obj) { at(c, "nodes", 0)["adoptId"] = "cp-1" }, `milner:nodes[0].adoptId: "cp-1" is not a libvirt domain UUID`},
		{"unpinned chart", func(c obj) { at(c, "apps", 0, "chart")["version"] = "" }, `milner:apps[0].chart.version: "" is not a pinned chart version`},
		{"chart version range", func(c obj) { at(c, "apps", 0, "chart")["version"] = "^0.29" }, `milner:apps[0].chart.version: "^0.29" is not a pinned chart version`},
		{"chart repo not https", func(c obj) { at(c, "apps", 0, "chart")["repo"] = "http://charts" }, "milner:apps[0].chart.repo:"},
		{"chart name missing", func(c obj) { delete(at(c, "apps", 0, "chart"), "name") }, "milner:apps[0].chart.name: is required"},
		{"duplicate app", func(c obj) { c["apps"] = append(c["apps"].([]any), at(c, "apps", 0)) }, `milner:apps[1].name: "vault" is also the name of apps[0]`},
		{"bad namespace", func(c obj) { at(c, "apps", 0)["namespace"] = "Vault" }, "milner:apps[0].namespace:"},
		{"previous name is current", func(c obj) { at(c, "apps", 0)["previousNames"] = []any{"vault"} }, `milner:apps[0].previousNames: "vault" is the current name of apps[0]`},
		{"bad secret value path", func(c obj) { at(c, "apps", 0)["secretValues"] = obj{"server..token": "vaultToken"} }, "milner:apps[0].secretValues:"},
		{"unknown layer", func(c obj) { c["stopAfter"] = "network" }, `milner:stopAfter: unknown layer "network"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireRefused(t, tc.edit, tc.want)
		})
	}
}

// requireRefused loads the base config as edit changes it and requires the
// refusal want (a config path and its problem): the bad-config catalog's one
// assertion. That the program registers nothing on a refused config is
// stacks' TestRefusedConfigRegistersNothing.
func requireRefused(t *testing.T, edit func(obj), want string) {
	t.Helper()
	c := baseConfig()
	edit(c)
	_, err := configtest.Load(raw(t, c), "milner:vaultToken")
	require.Error(t, err)
	assert.Contains(t, err.Error(), want)
}

func TestMissingAppSecretNamesTheCommand(t *testing.T) {
	r := raw(t, baseConfig())
	delete(r, "milner:vaultToken")
	_, err := configtest.Load(r)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:vaultToken: secret is not set")
	assert.Contains(t, err.Error(), "pulumi config set --secret milner:vaultToken <value>")
}

func TestPlainTextSecretIsRefused(t *testing.T) {
	_, err := configtest.Load(raw(t, baseConfig())) // vaultToken set, but not as a secret
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:vaultToken: is stored in plain text; run `pulumi config set --secret milner:vaultToken <value>`")
}

func TestEmptySecretIsMissing(t *testing.T) {
	r := raw(t, baseConfig())
	r["milner:vaultToken"] = ""
	_, err := config.Load(mapSource(r))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:vaultToken: secret is not set")
}

func TestEveryProblemIsReportedAtOnce(t *testing.T) {
	c := baseConfig()
	at(c, "nodes", 0)["memoryMiB"] = 512
	at(c, "nodes", 1)["address"] = "10.9.0.11"
	at(c, "apps", 0, "chart")["version"] = "latest"
	at(c, "network")["mode"] = "bridge"
	_, err := config.Load(mapSource(raw(t, c)))
	var cerr *config.ConfigError
	require.ErrorAs(t, err, &cerr)
	assert.Len(t, cerr.Problems, 4, strings.Join(cerr.Problems, "\n"))
}

func TestEvenControlPlaneCountWarns(t *testing.T) {
	c := baseConfig()
	at(c, "nodes", 3)["role"] = "controlplane"
	cfg, err := config.Load(mapSource(raw(t, c)))
	require.NoError(t, err, "an even control-plane count is a warning, not an error")
	require.Len(t, cfg.Warnings, 1)
	assert.Contains(t, cfg.Warnings[0], "milner:nodes: 4 control planes: etcd's quorum is 3, so it survives the loss of 1, no more than 3 control planes do")
}

func TestStoppedAppsLayerNeedsNoAppSecret(t *testing.T) {
	r := raw(t, baseConfig())
	delete(r, "milner:vaultToken")
	r["milner:stopAfter"] = "talos"
	_, err := config.Load(mapSource(r))
	assert.NoError(t, err)
}

// TestLibvirtLocal: only a URI that names no host has its pool's files on
// this machine; a loopback host may be a port forwarded elsewhere.
func TestLibvirtLocal(t *testing.T) {
	for uri, want := range map[string]bool{
		"qemu:///system":                     true,
		"qemu:///session":                    true,
		"qemu+unix:///system":                true,
		"qemu+ssh://root@kvm1/system":        false,
		"qemu+tls://kvm1.lan/system":         false,
		"qemu+tcp://localhost/system":        false,
		"qemu+ssh://root@127.0.0.1:2222/sys": false,
	} {
		if got := (&config.LibvirtConfig{URI: uri}).Local(); got != want {
			t.Errorf("%s: Local() = %v, want %v", uri, got, want)
		}
	}
}
