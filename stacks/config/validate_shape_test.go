package config_test

// The classes of issue #33 the config loader refuses: the network's shape,
// identity, versions and availability. One table per class; each case is
// a spelling no other case of its class covers.

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
)

type refusalCase struct {
	name string
	edit func(c obj)
	want string // a problem starts with this: the config path and the gist
}

func runRefusals(t *testing.T, cases []refusalCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { requireProblem(t, baseConfig(), tc.edit, tc.want, nil) })
	}
}

// requireProblem loads c edited (a proxmox config when secrets is set)
// and requires a problem starting with want.
func requireProblem(t *testing.T, c obj, edit func(obj), want string, secrets map[string]string) {
	t.Helper()
	edit(c)
	var err error
	if secrets != nil {
		_, err = configtest.Load(pxRaw(t, c, secrets), "milner:proxmoxApiToken")
	} else {
		_, err = configtest.Load(raw(t, c), "milner:vaultToken")
	}
	var cfgErr *config.ConfigError
	require.True(t, errors.As(err, &cfgErr), "want a *config.ConfigError, got %v", err)
	assert.True(t, pxHasProblem(cfgErr.Problems, want), "no problem starts with %q in:\n%s", want, strings.Join(cfgErr.Problems, "\n"))
}

func TestNetworkShape(t *testing.T) {
	cl := func(c obj) obj { return at(c, "cluster") }
	nw := func(c obj) obj { return at(c, "network") }
	// moveTo renumbers the base stack into cidr's first /24.
	moveTo := func(c obj, prefix string) {
		nw(c)["cidr"] = prefix + "0/24"
		nw(c)["dhcpRange"] = obj{"start": prefix + "100", "end": prefix + "199"}
		nw(c)["vipRange"] = obj{"start": prefix + "241", "end": prefix + "250"}
		cl(c)["vip"] = prefix + "240"
		for i, a := range []string{"11", "12", "13", "21"} {
			at(c, "nodes", i)["address"] = prefix + a
		}
	}
	runRefusals(t, []refusalCase{
		{"endpoint an address off the network", func(c obj) { cl(c)["endpoint"] = "https://10.8.0.5:6443" },
			"milner:cluster.endpoint: 10.8.0.5 is neither the VIP 10.9.0.240 nor in the node network 10.9.0.0/24"},
		{"endpoint with credentials", func(c obj) { cl(c)["endpoint"] = "https://admin:pw@10.9.0.240:6443" },
			`milner:cluster.endpoint: "https://admin:xxxxx@10.9.0.240:6443" carries credentials`},
		{"endpoint with a path", func(c obj) { cl(c)["endpoint"] = "https://10.9.0.240:6443/api" },
			`milner:cluster.endpoint: "https://10.9.0.240:6443/api" has a path`},
		{"endpoint port out of range", func(c obj) { cl(c)["endpoint"] = "https://10.9.0.240:70000" },
			`milner:cluster.endpoint: "https://10.9.0.240:70000" has no valid port`},
		{"node network inside the pod network", func(c obj) { moveTo(c, "10.244.3.") },
			"milner:network.cidr: 10.244.3.0/24 overlaps Talos' pod network 10.244.0.0/16"},
		{"node network inside the service network", func(c obj) { moveTo(c, "10.100.0.") },
			"milner:network.cidr: 10.100.0.0/24 overlaps Talos' service network 10.96.0.0/12"},
		{"node network holding the service network", func(c obj) {
			moveTo(c, "10.96.0.")
			nw(c)["cidr"] = "10.0.0.0/8"
		}, "milner:network.cidr: 10.0.0.0/8 overlaps Talos' pod network"},
		{"node network on loopback", func(c obj) { moveTo(c, "127.0.9.") },
			"milner:network.cidr: 127.0.9.0/24 overlaps the loopback network 127.0.0.0/8"},
		{"no dhcp range on libvirt", func(c obj) { delete(nw(c), "dhcpRange") },
			"milner:network.dhcpRange: is not set, so libvirt leases 10.9.0.2-10.9.0.254 to any MAC, including the VIP 10.9.0.240, the vipRange, nodes[0]'s address 10.9.0.11"},
		{"gateway libvirt does not serve", func(c obj) { nw(c)["gateway"] = "10.9.0.254" },
			"milner:network.gateway: 10.9.0.254 is not 10.9.0.1, the address libvirt gives the host"},
		{"nameserver the VIP", func(c obj) { nw(c)["nameservers"] = []any{"10.9.0.1", "10.9.0.240"} },
			"milner:network.nameservers[1]: 10.9.0.240 is the cluster VIP"},
	})
	t.Run("network mode on proxmox", func(t *testing.T) {
		requireProblem(t, pxBase(), func(c obj) { at(c, "network")["mode"] = "isolated" },
			`milner:network.mode: "isolated" is a libvirt setting`, pxSecrets)
	})
}

// TestIsolatedNetworkHasNoTimeSource: an isolated libvirt network with the
// Talos layer declared is warned about, naming milner:network.mode (the
// nodes reach no time server, so Talos' time never syncs); nat, or the
// substrate alone, is not.
func TestIsolatedNetworkHasNoTimeSource(t *testing.T) {
	warnings := func(t *testing.T, edit func(obj)) string {
		t.Helper()
		c := baseConfig()
		edit(c)
		cfg, err := configtest.Load(raw(t, c), "milner:vaultToken")
		require.NoError(t, err)
		return strings.Join(cfg.Warnings, "\n")
	}
	isolated := func(c obj) { at(c, "network")["mode"] = "isolated" }
	assert.Contains(t, warnings(t, isolated), "milner:network.mode: isolated: the nodes reach no time server")
	assert.Contains(t, warnings(t, isolated), "this host serves NTP at 10.9.0.1")
	assert.NotContains(t, warnings(t, func(obj) {}), "time server", "nat")
	assert.NotContains(t, warnings(t, func(c obj) { isolated(c); c["stopAfter"] = "substrate" }), "time server", "the substrate alone")
}

func TestIdentity(t *testing.T) {
	node := func(c obj, i int) obj { return at(c, "nodes", i) }
	const uuid = "6f1b9ad2-54a8-4a55-9b2c-3f1d2e4c5b6a"
	runRefusals(t, []refusalCase{
		{"mac all zeros", func(c obj) { node(c, 0)["mac"] = "00:00:00:00:00:00" },
			"milner:nodes[0].mac: 00:00:00:00:00:00 is the zero address"},
		{"mac a vendor's", func(c obj) { node(c, 1)["mac"] = "00:1b:21:0a:0b:0c" },
			"milner:nodes[1].mac: 00:1b:21:0a:0b:0c is a universally administered (vendor) address"},
		{"mac libvirt's tap prefix", func(c obj) { node(c, 2)["mac"] = "fe:54:00:09:00:13" },
			"milner:nodes[2].mac: fe:54:00:09:00:13 starts with 0xfe, which libvirt reserves"},
		{"two nodes adopt one domain", func(c obj) {
			node(c, 0)["adoptId"] = uuid
			node(c, 2)["adoptId"] = strings.ToUpper(uuid)
		}, `milner:nodes[2].adoptId: "` + strings.ToUpper(uuid) + `" is also nodes[0]'s adoptId`},
		{"two volumes adopt one path", func(c obj) {
			const key = "/var/lib/libvirt/images/t/a.qcow2"
			at(c, "substrate", "libvirt")["adopt"] = obj{"t-cp-1-data": key, "t-cp-2-data": key}
		}, `milner:substrate.libvirt.adopt.t-cp-2-data: "/var/lib/libvirt/images/t/a.qcow2" is also adopted as t-cp-1-data`},
		{"volume adopted from another pool", func(c obj) {
			at(c, "substrate", "libvirt")["adopt"] = obj{"t-cp-1-os": "/var/lib/libvirt/images/other/t-cp-1-os.qcow2"}
		}, `milner:substrate.libvirt.adopt.t-cp-1-os: "/var/lib/libvirt/images/other/t-cp-1-os.qcow2" is not in the stack's pool /var/lib/libvirt/images/t`},
		{"app named as the storage layer", func(c obj) { at(c, "apps", 0)["name"] = config.StorageAppName },
			`milner:apps[0].name: "local-path-provisioner" is the storage layer's logical name`},
		{"app named as the workloads", func(c obj) {
			c["workloads"] = obj{"name": "vault", "namespace": "npcs", "quota": obj{"requests.cpu": "2", "requests.memory": "4Gi"}}
		}, `milner:apps[0].name: "vault" is also milner:workloads.name`},
	})
	t.Run("proxmox node named as a disk holder", func(t *testing.T) {
		requireProblem(t, pxBase(), func(c obj) { at(c, "nodes", 2)["name"] = "cp-1-disks" },
			`milner:nodes[2].name: "cp-1-disks" is the name of nodes[0]'s disk holder VM`, pxSecrets)
	})
	t.Run("proxmox's own prefix passes", func(t *testing.T) {
		_, err := configtest.Load(pxRaw(t, pxBase(), pxSecrets), "milner:proxmoxApiToken")
		require.NoError(t, err, "bc:24:11 is Proxmox's OUI")
	})
}

// TestVersionsSupported: the supported-versions table decides the Talos
// and Kubernetes versions a stack may declare; each refusal names the
// table and what to use.
func TestVersionsSupported(t *testing.T) {
	cl := func(c obj) obj { return at(c, "cluster") }
	runRefusals(t, []refusalCase{
		{"a Talos minor past the table", func(c obj) { cl(c)["talosVersion"] = "v1.14.0" },
			"milner:cluster.talosVersion: unsupported Talos v1.14: Milner supports Talos v1.9 to v1.13 (stacks/config/supported-versions.txt, docs/compatibility.md); the nearest supported version is v1.13.9"},
		{"a Talos minor before the table", func(c obj) { cl(c)["talosVersion"] = "v1.8.4" },
			"milner:cluster.talosVersion: unsupported Talos v1.8: Milner supports Talos v1.9 to v1.13 (stacks/config/supported-versions.txt, docs/compatibility.md); the nearest supported version is v1.9.6"},
		{"a Talos pre-release", func(c obj) { cl(c)["talosVersion"] = "v1.14.0-rc.1" },
			`milner:cluster.talosVersion: "v1.14.0-rc.1" is not an exact Talos release like v1.13.9 (no range, no pre-release)`},
		{"kubernetes too new for talos 1.9", func(c obj) { cl(c)["kubernetesVersion"] = "v1.33.0" },
			"milner:cluster.kubernetesVersion: unsupported Kubernetes v1.33.0: Talos v1.9 supports Kubernetes v1.27 to v1.32 (machinery's compatibility table) (stacks/config/supported-versions.txt)"},
		{"kubernetes too old for talos 1.13", func(c obj) {
			cl(c)["talosVersion"] = "v1.13.9"
			cl(c)["kubernetesVersion"] = "v1.30.14"
		}, "milner:cluster.kubernetesVersion: unsupported Kubernetes v1.30.14: Talos v1.13 supports Kubernetes v1.31 to v1.36 (machinery's compatibility table)"},
		{"a Kubernetes pre-release", func(c obj) { cl(c)["kubernetesVersion"] = "v1.37.0-alpha.1" },
			`milner:cluster.kubernetesVersion: "v1.37.0-alpha.1" is not an exact Kubernetes release like v1.36.3 (no range, no pre-release)`},
		{"a contract past the provider's machinery", func(c obj) {
			cl(c)["talosVersion"] = "v1.13.9"
			cl(c)["kubernetesVersion"] = "v1.36.3"
			cl(c)["configContract"] = "v1.13"
		}, "milner:cluster.configContract: v1.13 is newer than the newest contract the Talos provider's machinery knows (v1.12, machinery v1.12.0)"},
	})
	t.Run("today's Talos passes", func(t *testing.T) {
		c := baseConfig()
		at(c, "cluster")["talosVersion"] = "v1.13.9"
		at(c, "cluster")["kubernetesVersion"] = "v1.36.3"
		at(c, "cluster")["configContract"] = "v1.12"
		_, err := configtest.Load(raw(t, c), "milner:vaultToken")
		require.NoError(t, err)
	})
	t.Run("a patch newer than the table's is warned about, not refused", func(t *testing.T) {
		c := baseConfig()
		at(c, "cluster")["talosVersion"] = "v1.9.7"
		cfg, err := configtest.Load(raw(t, c), "milner:vaultToken")
		require.NoError(t, err)
		assert.Contains(t, strings.Join(cfg.Warnings, "\n"), "milner:cluster.talosVersion: Talos v1.9.7 is newer than the newest v1.9 release the supported-versions table knows (v1.9.6")
	})
}

func TestAvailability(t *testing.T) {
	vault := func(c obj) obj {
		a := at(c, "apps", 0)
		a["chart"] = obj{"repo": "https://helm.releases.hashicorp.com", "name": "vault", "version": "0.29.1"}
		delete(a, "secretValues")
		a["vault"] = obj{}
		return a["vault"].(obj)
	}
	runRefusals(t, []refusalCase{
		{"two raft peers", func(c obj) { vault(c)["replicas"] = 2 },
			"milner:apps[0].vault.replicas: 2 raft peers keep quorum only while both run"},
		{"more peers than schedulable nodes", func(c obj) {
			vault(c)["replicas"] = 3
			at(c, "cluster")["allowSchedulingOnControlPlanes"] = false
		}, "milner:apps[0].vault.replicas: 3 raft peers but 1 nodes take workloads: the chart places one peer per node, so 2 would stay pending; lower replicas or add workers"},
		// The committed prod stack (control planes alone, scheduling on
		// them by default) with its first worker added: the default turns
		// off, and the refusal names it.
		{"more peers than schedulable nodes, the default turned off by a worker", func(c obj) { vault(c)["replicas"] = 3 },
			"milner:apps[0].vault.replicas: 3 raft peers but 1 nodes take workloads: the chart places one peer per node, so 2 would stay pending; lower replicas or add workers; the control planes take none: milner:cluster.allowSchedulingOnControlPlanes is unset, which means false once the stack has a worker (set it true to keep them scheduling)"},
		{"raft pvc of size zero", func(c obj) { vault(c)["dataSize"] = "0Gi" },
			`milner:apps[0].vault.dataSize: "0Gi" is no space`},
		{"audit pvc of size zero, decimal", func(c obj) { vault(c)["auditSize"] = "0.0" },
			`milner:apps[0].vault.auditSize: "0.0" is no space`},
	})
}
