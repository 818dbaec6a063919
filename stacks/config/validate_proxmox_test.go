package config_test

// Proxmox cases of the bad-config table. Helpers are prefixed "px" so they
// never collide with the libvirt table's helpers in this package (at is
// shared: config_test.go).

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
)

// pxToken is a well-formed test API token.
const pxToken = "milner@pve!pulumi=3f0c9b1e-6a2d-4c8e-9f71-0d5b2a4e8c13"

// pxBase is a small valid Proxmox stack: three control planes.
func pxBase() map[string]any {
	node := func(name, addr, mac string, vmID int) map[string]any {
		return map[string]any{"name": name, "role": "controlplane", "address": addr, "mac": mac, "vmId": vmID}
	}
	return map[string]any{
		"cluster": map[string]any{"name": "px", "talosVersion": "v1.9.5", "configContract": "v1.9", "kubernetesVersion": "v1.32.3", "vip": "192.168.7.60"},
		"substrate": map[string]any{"kind": "proxmox", "proxmox": map[string]any{
			"endpoint": "https://pve.test:8006/", "nodeName": "pve",
			"osDatastore": "local-lvm", "dataDatastore": "local-lvm", "imageDatastore": "local",
			"bridge": "vmbr0", "snippetsDatastore": "local",
			"ssh": map[string]any{"username": "root", "agent": true},
		}},
		"network": map[string]any{"cidr": "192.168.7.0/24"},
		"nodes": []any{
			node("cp-1", "192.168.7.50", "bc:24:11:00:07:50", 150),
			node("cp-2", "192.168.7.51", "bc:24:11:00:07:51", 151),
			node("cp-3", "192.168.7.52", "bc:24:11:00:07:52", 152),
		},
	}
}

// pxRaw turns a config object into raw config values plus the secrets.
func pxRaw(t *testing.T, c map[string]any, secrets map[string]string) map[string]string {
	t.Helper()
	out, err := configtest.RawConfig(c)
	require.NoError(t, err)
	maps.Copy(out, secrets)
	return out
}

// pxSecrets are the secrets a valid base config needs.
var pxSecrets = map[string]string{"milner:proxmoxApiToken": pxToken}

func TestProxmoxBaseConfigIsValid(t *testing.T) {
	_, err := configtest.Load(pxRaw(t, pxBase(), pxSecrets), "milner:proxmoxApiToken")
	require.NoError(t, err)
}

func TestProxmoxBadConfigs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(c map[string]any)
		secrets map[string]string
		want    string // the config path and the gist of the message
	}{
		{"duplicate vm ids", func(c map[string]any) { at(c, "nodes", 2)["vmId"] = 150 }, pxSecrets,
			"milner:nodes[2].vmId: 150 is also the VM id of nodes[0]"},
		{"vm id below range", func(c map[string]any) { at(c, "nodes", 1)["vmId"] = 99 }, pxSecrets,
			"milner:nodes[1].vmId: 99 is outside the Proxmox VM id range"},
		{"vm id missing", func(c map[string]any) { delete(at(c, "nodes", 0), "vmId") }, pxSecrets,
			"milner:nodes[0].vmId: 0 is outside the Proxmox VM id range"},
		{"vm id above range", func(c map[string]any) { at(c, "nodes", 0)["vmId"] = 1_000_000_000 }, pxSecrets,
			"milner:nodes[0].vmId: 1000000000 is outside the Proxmox VM id range"},
		{"holder id is another node's vm id", func(c map[string]any) { at(c, "nodes", 2)["vmId"] = 1150 }, pxSecrets,
			"milner:nodes[0].vmId: 150's disk holder VM id 1150 (vmId + 1000) is the VM id of nodes[2]"},
		{"holder id out of range", func(c map[string]any) { at(c, "nodes", 0)["vmId"] = 999_999_000 }, pxSecrets,
			"milner:nodes[0].vmId: 999999000 leaves no room for its disk holder VM"},
		{"unknown disk interface", func(c map[string]any) { at(c, "substrate", "proxmox")["diskInterface"] = "ide" }, pxSecrets,
			`milner:substrate.proxmox.diskInterface: unknown disk interface "ide"`},
		{"os datastore missing", func(c map[string]any) { delete(at(c, "substrate", "proxmox"), "osDatastore") }, pxSecrets,
			"milner:substrate.proxmox.osDatastore: is required"},
		{"data datastore missing", func(c map[string]any) { delete(at(c, "substrate", "proxmox"), "dataDatastore") }, pxSecrets,
			"milner:substrate.proxmox.dataDatastore: is required"},
		{"image datastore missing", func(c map[string]any) { delete(at(c, "substrate", "proxmox"), "imageDatastore") }, pxSecrets,
			"milner:substrate.proxmox.imageDatastore: is required"},
		{"node name missing", func(c map[string]any) { delete(at(c, "substrate", "proxmox"), "nodeName") }, pxSecrets,
			"milner:substrate.proxmox.nodeName: is required"},
		{"bridge missing", func(c map[string]any) { delete(at(c, "substrate", "proxmox"), "bridge") }, pxSecrets,
			"milner:substrate.proxmox.bridge: is required"},
		{"endpoint not https", func(c map[string]any) { at(c, "substrate", "proxmox")["endpoint"] = "http://pve:8006/" }, pxSecrets,
			`milner:substrate.proxmox.endpoint: "http://pve:8006/" is not an https:// URL`},
		{"compressed image", func(c map[string]any) {
			at(c, "substrate", "proxmox")["imageUrl"] = "https://factory.talos.dev/image/x/v1.9.5/nocloud-amd64.raw.xz"
		}, pxSecrets, "milner:substrate.proxmox.imageUrl:"},
		{"metal image", func(c map[string]any) {
			at(c, "substrate", "proxmox")["imageUrl"] = "https://factory.talos.dev/image/x/v1.9.5/metal-amd64.qcow2"
		}, pxSecrets, `milner:substrate.proxmox.imageUrl: "metal-amd64.qcow2" is not a Talos nocloud image`},
		{"explicit image without a digest", func(c map[string]any) {
			at(c, "substrate", "proxmox")["imageUrl"] = "https://images.example/talos/nocloud-amd64.qcow2"
		}, pxSecrets, "milner:substrate.proxmox.imageSha256: is required with an explicit imageUrl"},
		{"image digest malformed", func(c map[string]any) { at(c, "substrate", "proxmox")["imageSha256"] = "SHA256:abc" }, pxSecrets,
			`milner:substrate.proxmox.imageSha256: "SHA256:abc" is not a SHA-256 digest`},
		{"unknown proxmox key", func(c map[string]any) { at(c, "substrate", "proxmox")["datastore"] = "local" }, pxSecrets,
			`milner:substrate.proxmox: unknown key "datastore"`},
		{"proxmox section missing", func(c map[string]any) { delete(at(c, "substrate"), "proxmox") }, pxSecrets,
			"milner:substrate.proxmox: is required for kind proxmox"},
		{"adopt id is not the vm id", func(c map[string]any) { at(c, "nodes", 1)["adoptId"] = "9151" }, pxSecrets,
			`milner:nodes[1].adoptId: "9151" is not this node's vmId 151`},
		{"snippets datastore missing", func(c map[string]any) { delete(at(c, "substrate", "proxmox"), "snippetsDatastore") }, pxSecrets,
			"milner:substrate.proxmox.snippetsDatastore: is required"},
		{"ssh missing", func(c map[string]any) { delete(at(c, "substrate", "proxmox"), "ssh") }, pxSecrets,
			"milner:substrate.proxmox.ssh: is required"},
		{"ssh username missing", func(c map[string]any) { delete(at(c, "substrate", "proxmox", "ssh"), "username") }, pxSecrets,
			"milner:substrate.proxmox.ssh.username: is required"},
		{"ssh username malformed", func(c map[string]any) { at(c, "substrate", "proxmox", "ssh")["username"] = "root@pam" }, pxSecrets,
			`milner:substrate.proxmox.ssh.username: "root@pam" is not a user name`},
		{"unknown ssh key", func(c map[string]any) { at(c, "substrate", "proxmox", "ssh")["user"] = "root" }, pxSecrets,
			`milner:substrate.proxmox.ssh: unknown key "user"`},
		{"ssh without agent or key", func(c map[string]any) { at(c, "substrate", "proxmox", "ssh")["agent"] = false }, pxSecrets,
			"milner:proxmoxSshPrivateKey: secret is not set (needed by substrate.proxmox.ssh without agent: true)"},
		{"token missing", func(map[string]any) {}, nil,
			"milner:proxmoxApiToken: secret is not set (needed by substrate kind proxmox); run `pulumi config set --secret milner:proxmoxApiToken <value>`"},
		{"token malformed", func(map[string]any) {}, map[string]string{"milner:proxmoxApiToken": "root:hunter2"},
			"milner:proxmoxApiToken: is not a Proxmox VE API token of the form user@realm!tokenid=secret"},
		{"token empty", func(map[string]any) {}, map[string]string{"milner:proxmoxApiToken": ""},
			"milner:proxmoxApiToken: secret is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pxBase()
			tc.edit(c)
			_, err := configtest.Load(pxRaw(t, c, tc.secrets), "milner:proxmoxApiToken")
			require.Error(t, err)
			var cfgErr *config.ConfigError
			require.True(t, errors.As(err, &cfgErr), "want a *config.ConfigError, got %v", err)
			assert.True(t, pxHasProblem(cfgErr.Problems, tc.want), "no problem starts with %q in:\n%s", tc.want, strings.Join(cfgErr.Problems, "\n"))
			assert.NotContains(t, err.Error(), "hunter2", "a secret is never echoed")
		})
	}
}

// pxHasProblem reports whether one of problems starts with want.
func pxHasProblem(problems []string, want string) bool {
	for _, p := range problems {
		if strings.HasPrefix(p, want) {
			return true
		}
	}
	return false
}

// TestProxmoxTokenIsNotNeededByLibvirt: the token check is kind-specific.
func TestProxmoxTokenIsNotNeededByLibvirt(t *testing.T) {
	c := pxBase()
	c["substrate"] = map[string]any{"kind": "libvirt", "libvirt": map[string]any{"domainType": "qemu"}}
	// libvirt leases the whole network without a range, and Proxmox's OUI is not libvirt's.
	at(c, "network")["dhcpRange"] = map[string]any{"start": "192.168.7.100", "end": "192.168.7.199"}
	for i, n := range c["nodes"].([]any) {
		delete(n.(map[string]any), "vmId")
		n.(map[string]any)["mac"] = fmt.Sprintf("52:54:00:00:07:%02d", 50+i)
	}
	_, err := config.Load(pxSource(pxRaw(t, c, nil)))
	require.NoError(t, err)
}

// pxSource is a config.ConfigSource over raw values, every one of them secret.
type pxSource map[string]string

func (m pxSource) GetConfig(k string) (string, bool) { v, ok := m[k]; return v, ok }

func (m pxSource) IsConfigSecret(string) bool { return true }

func TestProxmoxDefaults(t *testing.T) {
	cfg, err := config.Load(pxSource(pxRaw(t, pxBase(), pxSecrets)))
	require.NoError(t, err)
	px := cfg.Substrate.Proxmox
	assert.Equal(t, "virtio", string(px.DiskInterface))
	assert.Equal(t, "https://factory.talos.dev/image/"+config.DefaultSchematic+"/v1.9.5/nocloud-amd64.qcow2", px.ImageURL)
}

// TestProxmoxTokenInPlainTextIsRefused: a token set without --secret is a
// problem naming the command, and registers nothing.
func TestProxmoxTokenInPlainTextIsRefused(t *testing.T) {
	_, err := configtest.Load(pxRaw(t, pxBase(), pxSecrets)) // no secret keys
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:proxmoxApiToken: is stored in plain text; run `pulumi config set --secret milner:proxmoxApiToken <value>`")
	assert.NotContains(t, err.Error(), pxToken, "a secret is never echoed")
}
