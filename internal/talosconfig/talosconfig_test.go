package talosconfig_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/talosconfig"
)

// node is a control plane's input with a patch shaped like Milner's.
func node(patches ...string) talosconfig.Input {
	return talosconfig.Input{
		ClusterName: "t", Endpoint: "https://10.73.0.240:6443", KubernetesVersion: "v1.32.3",
		Contract: "v1.9", MachineType: "controlplane", Platform: talosconfig.Metal,
		Patches: append([]string{`{"machine":{"install":{"disk":"/dev/vda"},"network":{"hostname":"cp-1","interfaces":[{"deviceSelector":{"hardwareAddr":"52:54:00:73:00:11"},"addresses":["10.73.0.11/24"],"vip":{"ip":"10.73.0.240"}}]}}}`}, patches...),
	}
}

func TestValidPatchPasses(t *testing.T) {
	s, err := talosconfig.NewSecrets("v1.9")
	require.NoError(t, err)
	assert.NoError(t, talosconfig.Validate(s, node()))
}

// TestBrokenPatchesAreCaught shows what Talos' own validator refuses in a
// patch that the provider would only refuse on a live node.
func TestBrokenPatchesAreCaught(t *testing.T) {
	s, err := talosconfig.NewSecrets("v1.9")
	require.NoError(t, err)
	for name, tc := range map[string]struct{ patch, want string }{
		"vip not an address": {`{"machine":{"network":{"interfaces":[{"deviceSelector":{"hardwareAddr":"52:54:00:73:00:11"},"vip":{"ip":"10.73.0.x"}}]}}}`, "vip"},
		"unknown field":      {`{"machine":{"instal":{"disk":"/dev/vda"}}}`, "instal"},
	} {
		t.Run(name, func(t *testing.T) {
			err := talosconfig.Validate(s, node(tc.patch))
			require.Error(t, err)
			t.Log(err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestMetalNeedsAnInstallDiskNocloudDoesNot(t *testing.T) {
	s, err := talosconfig.NewSecrets("v1.9")
	require.NoError(t, err)
	in := node()
	in.Patches = []string{`{"machine":{"network":{"hostname":"cp-1"}}}`}
	assert.Error(t, talosconfig.Validate(s, in), "metal installs to disk")
	in.Platform = talosconfig.Nocloud
	assert.NoError(t, talosconfig.Validate(s, in), "nocloud boots the installed image")
}
