package engine

import (
	"fmt"
	"regexp"
	"strings"
)

// missingPlugin matches the engine's error for a resource plugin it found
// nowhere: sdk/v3 v3.276.0 common/workspace/plugins.go MissingError.Error,
// "no resource plugin 'pulumi-resource-<name>' found in the workspace
// [at version v<version>][ or on your $PATH][ from <download URL>]".
var missingPlugin = regexp.MustCompile(`no resource plugin 'pulumi-resource-([A-Za-z0-9_.-]+)' found in the workspace(?: at version v([^\s,;:'"]+))?(?: or on your \$PATH)?(?: from ([^\s,;'"]+))?`)

// builtPlugins are the plugins scripts/tools.sh builds from the Go modules
// pinned under tools/ (its targets, by plugin name): for these the tested
// binary is the built one, not a download.
var builtPlugins = map[string]string{
	"libvirt":    "scripts/tools.sh libvirt",
	"kubernetes": "scripts/tools.sh kubernetes",
}

// pluginHints names, for every plugin msg says is missing, the command
// that puts it where the engine looks (tools first on PATH, then PATH,
// then Pulumi's plugin cache): scripts/tools.sh for what it builds,
// `pulumi plugin install` with the version and server the program's SDK
// asks for otherwise. It returns "" when msg names no missing plugin.
func pluginHints(msg, tools string) string {
	var hints []string
	seen := map[string]bool{}
	for _, m := range missingPlugin.FindAllStringSubmatch(msg, -1) {
		// The engine follows the message with ": <cause>" or "."; a URL
		// does not end in either.
		name, version, server := m[1], m[2], strings.TrimRight(m[3], ":.")
		if seen[name] {
			continue
		}
		seen[name] = true
		if built, ok := builtPlugins[name]; ok {
			hints = append(hints, fmt.Sprintf("%s: run %s (builds it into %s)", name, built, tools))
			continue
		}
		install := "pulumi plugin install resource " + name
		if version != "" {
			install += " v" + version
		}
		if server != "" {
			install += " --server " + server
		}
		hints = append(hints, fmt.Sprintf("%s: run %s (into Pulumi's plugin cache)", name, install))
	}
	if len(hints) == 0 {
		return ""
	}
	return "missing plugins, each with the command that provides it: " + strings.Join(hints, "; ")
}
