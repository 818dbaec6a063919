package engine

import "testing"

// TestPluginHints: each missing plugin is answered with the command that
// provides it; the messages are the engine's own (MissingError.Error at
// sdk/v3 v3.276.0, with and without a version and a download server).
func TestPluginHints(t *testing.T) {
	const tools = "/repo/.tools/bin"
	for _, tc := range []struct{ name, msg, want string }{
		{"published, with its server",
			"failed to load plugin: no resource plugin 'pulumi-resource-talos' found in the workspace at version v0.7.1 or on your $PATH from github://api.github.com/pulumiverse",
			"missing plugins, each with the command that provides it: talos: run pulumi plugin install resource talos v0.7.1 --server github://api.github.com/pulumiverse (into Pulumi's plugin cache)"},
		{"as the engine's preview ends with it (tests/integration TestQuickStartOnAFreshHome)",
			"preview: BAIL: no resource plugin 'pulumi-resource-talos' found in the workspace at version v0.7.1 or on your $PATH from github://api.github.com/pulumiverse: no resource plugin 'pulumi-resource-talos' found in the workspace at version v0.7.1 or on your $PATH from github://api.github.com/pulumiverse",
			"missing plugins, each with the command that provides it: talos: run pulumi plugin install resource talos v0.7.1 --server github://api.github.com/pulumiverse (into Pulumi's plugin cache)"},
		{"published, no server",
			"no resource plugin 'pulumi-resource-proxmoxve' found in the workspace or on your $PATH",
			"missing plugins, each with the command that provides it: proxmoxve: run pulumi plugin install resource proxmoxve (into Pulumi's plugin cache)"},
		{"built by tools.sh",
			"no resource plugin 'pulumi-resource-kubernetes' found in the workspace at version v4.32.0 or on your $PATH",
			"missing plugins, each with the command that provides it: kubernetes: run scripts/tools.sh kubernetes (builds it into /repo/.tools/bin)"},
		{"two plugins, one named twice",
			"no resource plugin 'pulumi-resource-libvirt' found in the workspace or on your $PATH; no resource plugin 'pulumi-resource-talos' found in the workspace at version v0.7.1 or on your $PATH from github://api.github.com/pulumiverse; no resource plugin 'pulumi-resource-libvirt' found in the workspace or on your $PATH",
			"missing plugins, each with the command that provides it: libvirt: run scripts/tools.sh libvirt (builds it into /repo/.tools/bin); talos: run pulumi plugin install resource talos v0.7.1 --server github://api.github.com/pulumiverse (into Pulumi's plugin cache)"},
		{"no missing plugin", "stack \"dev\": up: step failed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pluginHints(tc.msg, tools); got != tc.want {
				t.Errorf("pluginHints:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
