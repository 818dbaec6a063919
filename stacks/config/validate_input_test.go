package config_test

// Input-hygiene cases of the bad-config catalog (validate_input.go). They
// share baseConfig, raw and at with config_test.go.

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
)

// blankSHA is the sha256sum of `qemu-img create -f qcow2 boot.qcow2 64M`.
const blankSHA = "1b7af784841125887e688254229e282829e17245d0e47fe7280da9b68a30d9e1"

func TestBadInputs(t *testing.T) {
	lv := func(c obj) obj { return at(c, "substrate", "libvirt") }
	controlPlanes := func(n int) func(c obj) {
		return func(c obj) {
			var nodes []any
			for i := range n {
				nodes = append(nodes, obj{"name": fmt.Sprintf("cp-%d", i+1), "role": "controlplane",
					"address": fmt.Sprintf("10.9.0.%d", 11+i), "mac": fmt.Sprintf("52:54:00:09:00:%02x", 0x11+i)})
			}
			c["nodes"] = nodes
		}
	}
	for _, tc := range []struct {
		name string
		edit func(c obj)
		want string // the config path and the gist of the message
	}{
		{"mac dash notation duplicates colon", func(c obj) { at(c, "nodes", 1)["mac"] = "52-54-00-09-00-11" },
			"milner:nodes[1].mac: 52:54:00:09:00:11 is also the MAC of nodes[0]"},
		{"mac dot notation duplicates colon", func(c obj) { at(c, "nodes", 2)["mac"] = "5254.0009.0011" },
			"milner:nodes[2].mac: 52:54:00:09:00:11 is also the MAC of nodes[0]"},
		{"mac bare hex duplicates colon", func(c obj) { at(c, "nodes", 3)["mac"] = "525400090011" },
			"milner:nodes[3].mac: 52:54:00:09:00:11 is also the MAC of nodes[0]"},
		{"mac mixed separators", func(c obj) { at(c, "nodes", 0)["mac"] = "52:54:00-09-00-11" }, `milner:nodes[0].mac: "52:54:00-09-00-11" is not a MAC address`},
		{"mac eui-64", func(c obj) { at(c, "nodes", 0)["mac"] = "52:54:00:09:00:11:00:01" }, "milner:nodes[0].mac:"},
		{"pool path root", func(c obj) { lv(c)["poolPath"] = "/" }, `milner:substrate.libvirt.poolPath: "/" is a shared directory`},
		{"pool path etc", func(c obj) { lv(c)["poolPath"] = "/etc" }, `milner:substrate.libvirt.poolPath: "/etc" is inside the system directory /etc`},
		{"pool path under etc", func(c obj) { lv(c)["poolPath"] = "/etc/milner/pool" }, `milner:substrate.libvirt.poolPath: "/etc/milner/pool" is inside the system directory /etc`},
		{"pool path traversal", func(c obj) { lv(c)["poolPath"] = "/var/lib/libvirt/images/../../../etc" },
			`milner:substrate.libvirt.poolPath: "/var/lib/libvirt/images/../../../etc" is not a clean path`},
		{"pool path is the default pool", func(c obj) { lv(c)["poolPath"] = "/var/lib/libvirt/images" },
			`milner:substrate.libvirt.poolPath: "/var/lib/libvirt/images" is a shared directory`},
		{"pool path home", func(c obj) { lv(c)["poolPath"] = "/home" }, `milner:substrate.libvirt.poolPath: "/home" is a shared directory`},
		{"pool path under usr", func(c obj) { lv(c)["poolPath"] = "/usr/local/pool" }, "milner:substrate.libvirt.poolPath: \"/usr/local/pool\" is inside the system directory /usr"},
		{"uri unknown scheme", func(c obj) { lv(c)["uri"] = "xen:///system" }, `milner:substrate.libvirt.uri: unknown libvirt URI scheme "xen"`},
		{"uri ext transport", func(c obj) { lv(c)["uri"] = "qemu+ext:///system?command=/tmp/x" }, `milner:substrate.libvirt.uri: unknown libvirt URI scheme "qemu+ext"`},
		{"uri shell characters", func(c obj) { lv(c)["uri"] = "qemu:///system;rm -rf /" }, `milner:substrate.libvirt.uri: "qemu:///system;rm -rf /" contains ";"`},
		{"uri command substitution", func(c obj) { lv(c)["uri"] = "qemu+ssh://$(id)@host/system" }, `milner:substrate.libvirt.uri: "qemu+ssh://$(id)@host/system" contains "$"`},
		{"uri control character", func(c obj) { lv(c)["uri"] = "qemu:///system\n" }, `milner:substrate.libvirt.uri: "qemu:///system\n" contains "\n"`},
		{"uri without driver path", func(c obj) { lv(c)["uri"] = "qemu+ssh://root@host/" }, `milner:substrate.libvirt.uri: "qemu+ssh://root@host/" names no QEMU driver instance`},
		{"boot image over http", func(c obj) { lv(c)["bootImage"] = "http://images.lan/talos.qcow2"; lv(c)["bootImageSha256"] = blankSHA },
			`milner:substrate.libvirt.bootImage: "http://images.lan/talos.qcow2" is not an https:// URL or a local path`},
		{"boot image url without checksum", func(c obj) { lv(c)["bootImage"] = "https://images.lan/talos.qcow2" },
			"milner:substrate.libvirt.bootImageSha256: is required with a downloaded bootImage"},
		{"boot image relative path", func(c obj) { lv(c)["bootImage"] = "images/talos.qcow2" },
			`milner:substrate.libvirt.bootImage: "images/talos.qcow2" is not an https:// URL or a clean absolute path`},
		{"boot image checksum malformed", func(c obj) { lv(c)["bootImage"] = "/srv/talos.qcow2"; lv(c)["bootImageSha256"] = "sha256:abc" },
			`milner:substrate.libvirt.bootImageSha256: "sha256:abc" is not a SHA-256 digest`},
		{"adopt unknown object", func(c obj) { lv(c)["adopt"] = obj{"milner-dev-cp-9-os": "/var/lib/libvirt/images/milner-dev/x.qcow2"} },
			"milner:substrate.libvirt.adopt.milner-dev-cp-9-os: is not a pool, network or volume of this stack"},
		{"adopt a domain by the map", func(c obj) { lv(c)["adopt"] = obj{"milner-dev-cp-1": "8b1c3a52-0f6e-4c55-9d2a-6a0b6f1e2d3c"} },
			"milner:substrate.libvirt.adopt.milner-dev-cp-1: is not a pool, network or volume of this stack"},
		{"adopt pool by name not uuid", func(c obj) { lv(c)["adopt"] = obj{"t-pool": "milner-dev"} },
			`milner:substrate.libvirt.adopt.t-pool: "milner-dev" is not a libvirt UUID`},
		{"adopt volume by name not key", func(c obj) { lv(c)["adopt"] = obj{"t-cp-1-data": "t-cp-1-data.qcow2"} },
			`milner:substrate.libvirt.adopt.t-cp-1-data: "t-cp-1-data.qcow2" is not a volume key`},
		{"vip range contains the gateway", func(c obj) {
			at(c, "network")["gateway"] = "10.9.0.245"
		}, "milner:network.vipRange: contains the gateway 10.9.0.245"},
		{"nameserver unspecified", func(c obj) { at(c, "network")["nameservers"] = []any{"0.0.0.0"} },
			"milner:network.nameservers[0]: 0.0.0.0 is the unspecified address"},
		{"nameserver multicast", func(c obj) { at(c, "network")["nameservers"] = []any{"10.9.0.1", "224.0.0.251"} },
			"milner:network.nameservers[1]: 224.0.0.251 is a multicast or broadcast address"},
		{"nameserver loopback", func(c obj) { at(c, "network")["nameservers"] = []any{"127.0.0.53"} },
			"milner:network.nameservers[0]: 127.0.0.53 is a loopback address"},
		{"nameserver twice", func(c obj) { at(c, "network")["nameservers"] = []any{"10.9.0.1", "10.9.0.1"} },
			"milner:network.nameservers[1]: 10.9.0.1 is also nameservers[0]"},
		{"same release in one namespace", func(c obj) {
			c["apps"] = append(c["apps"].([]any), obj{
				"name": "vault2", "releaseName": "vault", "namespace": "vault",
				"chart": obj{"repo": "https://helm.releases.hashicorp.com", "name": "vault", "version": "0.29.1"},
			})
		}, `milner:apps[1].releaseName: release "vault" in namespace "vault" is also apps[0]'s`},
		{"nine control planes", controlPlanes(9), "milner:nodes: 9 control planes: more than 7 etcd members"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireRefused(t, tc.edit, tc.want)
		})
	}
}

// TestMACNotationsAreNormalized: a MAC in dash or dot notation reaches the
// substrate in the colon form, so libvirt and the duplicate check see one spelling.
func TestMACNotationsAreNormalized(t *testing.T) {
	c := baseConfig()
	at(c, "nodes", 0)["mac"] = "52-54-00-09-00-11"
	at(c, "nodes", 1)["mac"] = "5254.0009.0012"
	at(c, "nodes", 2)["mac"] = "52:54:00:09:00:1A"
	cfg, err := config.Load(mapSource(raw(t, c)))
	require.NoError(t, err)
	assert.Equal(t, []string{"52:54:00:09:00:11", "52:54:00:09:00:12", "52:54:00:09:00:1a"},
		[]string{cfg.Nodes[0].MAC, cfg.Nodes[1].MAC, cfg.Nodes[2].MAC})
}

// TestGoodInputsAtTheEdges: the largest accepted control-plane count, a
// pinned download, a pool under /tmp's subdirectory and a remote URI pass.
func TestGoodInputsAtTheEdges(t *testing.T) {
	c := baseConfig()
	var nodes []any
	for i := range config.MaxControlPlanes {
		nodes = append(nodes, obj{"name": fmt.Sprintf("cp-%d", i+1), "role": "controlplane",
			"address": fmt.Sprintf("10.9.0.%d", 11+i), "mac": fmt.Sprintf("52:54:00:09:00:%02x", 0x11+i)})
	}
	c["nodes"] = nodes
	l := at(c, "substrate", "libvirt")
	l["bootImage"] = "https://images.lan/talos.qcow2"
	l["bootImageSha256"] = blankSHA
	l["poolPath"] = "/tmp/milner-pool"
	l["uri"] = "qemu+ssh://root@hv1.lan/system?keyfile=/root/.ssh/id_ed25519"
	cfg, err := config.Load(mapSource(raw(t, c)))
	require.NoError(t, err)
	assert.Empty(t, cfg.Warnings)
}

// TestDefaultBootImageWarnsUnpinned: the derived factory URL cannot be
// pinned offline, so it is a warning naming the key, not an error.
func TestDefaultBootImageWarnsUnpinned(t *testing.T) {
	c := baseConfig()
	delete(at(c, "substrate", "libvirt"), "bootImage")
	cfg, err := config.Load(mapSource(raw(t, c)))
	require.NoError(t, err)
	require.Len(t, cfg.Warnings, 1)
	assert.Contains(t, cfg.Warnings[0], "milner:substrate.libvirt.bootImageSha256: the default boot image")
}
