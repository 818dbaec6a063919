package config_test

// Hostile and careless inputs of the bad-config catalog (validate_hostile.go):
// each case asserts the config path; that a refused config registers
// nothing is stacks' TestRefusedConfigRegistersNothing (the program loads
// its config before it registers anything).

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
)

func TestHostileInputs(t *testing.T) {
	lv := func(c obj) obj { return at(c, "substrate", "libvirt") }
	app := func(c obj) obj { return at(c, "apps", 0) }
	for _, tc := range []struct {
		name string
		edit func(c obj)
		want string // the config path and the gist of the message
	}{
		{"vip is the broadcast address", func(c obj) { at(c, "cluster")["vip"] = "10.9.0.255" },
			"milner:cluster.vip: 10.9.0.255 is the network or broadcast address of 10.9.0.0/24"},
		{"vip is the network address", func(c obj) { at(c, "cluster")["vip"] = "10.9.0.0" },
			"milner:cluster.vip: 10.9.0.0 is the network or broadcast address"},
		{"pool path a user's home", func(c obj) { lv(c)["poolPath"] = "/home/alice" }, `milner:substrate.libvirt.poolPath: "/home/alice" is a user's home`},
		{"pool path docker's", func(c obj) { lv(c)["poolPath"] = "/var/lib/docker/volumes" }, `milner:substrate.libvirt.poolPath: "/var/lib/docker/volumes" is inside /var/lib/docker`},
		{"pool path postgres'", func(c obj) { lv(c)["poolPath"] = "/var/lib/postgresql" }, `milner:substrate.libvirt.poolPath: "/var/lib/postgresql" is inside /var/lib/postgresql`},
		{"pool path proxmox's", func(c obj) { lv(c)["poolPath"] = "/var/lib/vz/images" }, `milner:substrate.libvirt.poolPath: "/var/lib/vz/images" is inside /var/lib/vz`},
		{"pool path libvirt's qemu state", func(c obj) { lv(c)["poolPath"] = "/var/lib/libvirt/qemu" }, `milner:substrate.libvirt.poolPath: "/var/lib/libvirt/qemu" is inside /var/lib/libvirt/qemu`},
		{"pool path the logs", func(c obj) { lv(c)["poolPath"] = "/var/log/milner" }, `milner:substrate.libvirt.poolPath: "/var/log/milner" is inside /var/log`},
		{"pool path kubelet's", func(c obj) { lv(c)["poolPath"] = "/var/lib/kubelet/pods" }, `milner:substrate.libvirt.poolPath: "/var/lib/kubelet/pods" is inside /var/lib/kubelet`},
		{"pool path a device", func(c obj) { lv(c)["poolPath"] = "/dev/sda" }, `milner:substrate.libvirt.poolPath: "/dev/sda" is inside the system directory /dev`},
		{"boot image a device", func(c obj) { lv(c)["bootImage"] = "/dev/sda" }, `milner:substrate.libvirt.bootImage: "/dev/sda" is a device or kernel file`},
		{"boot image a kernel file", func(c obj) { lv(c)["bootImage"] = "/proc/kcore" }, `milner:substrate.libvirt.bootImage: "/proc/kcore" is a device or kernel file`},
		{"boot image a socket dir", func(c obj) { lv(c)["bootImage"] = "/run/libvirt/libvirt-sock" }, `milner:substrate.libvirt.bootImage: "/run/libvirt/libvirt-sock" is a device or kernel file`},
		{"storage path off the data disk", func(c obj) { c["storage"] = obj{"path": "/var/local-path"} },
			`milner:storage.path: "/var/local-path" is off the data disk`},
		{"storage path beside the data disk", func(c obj) { c["storage"] = obj{"path": "/var/mnt/database"} },
			`milner:storage.path: "/var/mnt/database" is off the data disk`},
		{"storage in kube-system", func(c obj) { c["storage"] = obj{"namespace": "kube-system"} },
			`milner:storage.namespace: "kube-system" is a Kubernetes system namespace`},
		{"app in kube-system", func(c obj) { app(c)["namespace"] = "kube-system" }, `milner:apps[0].namespace: "kube-system" is a Kubernetes system namespace`},
		{"app in kube-public", func(c obj) { app(c)["namespace"] = "kube-public" }, `milner:apps[0].namespace: "kube-public" is a Kubernetes system namespace`},
		{"app in kube-node-lease", func(c obj) { app(c)["namespace"] = "kube-node-lease" }, `milner:apps[0].namespace: "kube-node-lease" is a Kubernetes system namespace`},
		{"app in default", func(c obj) { app(c)["namespace"] = "default" }, `milner:apps[0].namespace: "default" is a Kubernetes system namespace`},
		{"app gets the proxmox token", func(c obj) {
			app(c)["secretValues"] = obj{"server.token": "vaultToken", "extra.pve": "proxmoxApiToken"}
		},
			"milner:apps[0].secretValues[extra.pve]: maps milner:proxmoxApiToken, a credential of the hypervisor or the cluster"},
		{"app gets the ssh key", func(c obj) {
			app(c)["secretValues"] = obj{"server.token": "vaultToken", "ssh.key": "proxmoxSshPrivateKey"}
		},
			"milner:apps[0].secretValues[ssh.key]: maps milner:proxmoxSshPrivateKey"},
		{"app gets the kubeconfig", func(c obj) { app(c)["secretValues"] = obj{"server.token": "vaultToken", "kube.config": "kubeconfig"} },
			"milner:apps[0].secretValues[kube.config]: maps milner:kubeconfig"},
		{"installer latest", func(c obj) { at(c, "cluster")["installImage"] = "ghcr.io/siderolabs/installer:latest" },
			`milner:cluster.installImage: "ghcr.io/siderolabs/installer:latest" is not pinned: use the tag of talosVersion (ghcr.io/siderolabs/installer:v1.9.5)`},
		{"installer without a tag", func(c obj) { at(c, "cluster")["installImage"] = "ghcr.io/siderolabs/installer" },
			`milner:cluster.installImage: "ghcr.io/siderolabs/installer" is not pinned`},
		{"installer of another version", func(c obj) { at(c, "cluster")["installImage"] = "ghcr.io/siderolabs/installer:v1.9.4" },
			`milner:cluster.installImage: "ghcr.io/siderolabs/installer:v1.9.4" is not pinned`},
		{"installer with a short digest", func(c obj) { at(c, "cluster")["installImage"] = "ghcr.io/siderolabs/installer@sha256:abc" },
			`milner:cluster.installImage: "ghcr.io/siderolabs/installer@sha256:abc" is not an image reference`},
		{"installer with shell syntax", func(c obj) { at(c, "cluster")["installImage"] = "ghcr.io/x/installer:v1.9.5;id" },
			`milner:cluster.installImage: "ghcr.io/x/installer:v1.9.5;id" is not an image reference`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireRefused(t, tc.edit, tc.want)
		})
	}
}

// TestPinnedInstallersPass: the version's tag, a factory installer of the
// version and a digest are accepted.
func TestPinnedInstallersPass(t *testing.T) {
	for _, img := range []string{
		"ghcr.io/siderolabs/installer:v1.9.5",
		"factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.9.5",
		"ghcr.io/siderolabs/installer@sha256:" + strings.Repeat("ab", 32),
		"registry.lan:5000/talos/installer:v1.9.5@sha256:" + strings.Repeat("01", 32),
	} {
		c := baseConfig()
		at(c, "cluster")["installImage"] = img
		_, err := config.Load(mapSource(raw(t, c)))
		assert.NoError(t, err, img)
	}
}

func TestHostileProxmoxNames(t *testing.T) {
	for _, tc := range []struct {
		field, value string
	}{
		{"bridge", "vmbr0,tag=20"},
		{"bridge", "vmbr0;firewall=0"},
		{"osDatastore", "local-lvm,size=1T"},
		{"dataDatastore", "local=x"},
		{"imageDatastore", "local,content=import"},
		{"snippetsDatastore", "local snippets"},
		{"nodeName", "pve,2"},
	} {
		t.Run(tc.field+" "+tc.value, func(t *testing.T) {
			c := pxBase()
			at(c, "substrate", "proxmox")[tc.field] = tc.value
			_, err := configtest.Load(pxRaw(t, c, pxSecrets), "milner:proxmoxApiToken")
			require.Error(t, err)
			var cfgErr *config.ConfigError
			require.True(t, errors.As(err, &cfgErr), "want a *config.ConfigError, got %v", err)
			want := "milner:substrate.proxmox." + tc.field + `: "` + tc.value + `" is not a Proxmox name`
			assert.True(t, pxHasProblem(cfgErr.Problems, want), "no problem starts with %q in:\n%s", want, strings.Join(cfgErr.Problems, "\n"))
		})
	}
}
