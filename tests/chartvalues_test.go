package tests

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
)

// documentedKeys are, per chart and version, the value keys the program
// (and the committed stacks) may set, each one checked by hand against the
// chart's documented values. A key names a whole subtree: server.env
// admits any environment variable. No real chart can be fetched here, so
// this list is the check; bump it with the chart version.
var documentedKeys = map[string][]string{
	// rancher/local-path-provisioner deploy/chart/local-path-provisioner
	// values.yaml and README.md "Configuration", chart 0.0.33.
	"local-path-provisioner-release": {"storageClass.create", "storageClass.provisionerName", "nodePathMap"},
	// hashicorp/vault-helm values.yaml, chart 0.29.1 (unchanged in 0.30.x).
	"vault-release": {
		"global.tlsDisable", "server.dev.enabled", "server.standalone.enabled",
		"server.ha.enabled", "server.ha.replicas", "server.ha.raft.enabled", "server.ha.raft.setNodeId", "server.ha.raft.config",
		"server.dataStorage.enabled", "server.dataStorage.size", "server.dataStorage.storageClass",
		"server.auditStorage.enabled", "server.auditStorage.size", "server.auditStorage.storageClass",
		"server.volumes", "server.volumeMounts", "server.extraEnvironmentVars", "ui.enabled",
	},
	// woodpecker-ci/helm charts/woodpecker (3.x) with its server and agent
	// subcharts' values.yaml.
	"woodpecker-release": {
		"server.createAgentSecret", "server.extraSecretNamesForEnvFrom", "server.env", "server.persistentVolume.storageClass",
		"agent.mapAgentSecret", "agent.extraSecretNamesForEnvFrom", "agent.env", "agent.persistence.storageClass", "agent.replicaCount",
	},
}

// undocumented returns the value paths of v that no documented key covers.
func undocumented(v map[string]any, prefix string, documented map[string]bool) []string {
	var out []string
	for k, e := range v {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		if documented[path] {
			continue
		}
		if m, ok := e.(map[string]any); ok {
			out = append(out, undocumented(m, path, documented)...)
			continue
		}
		out = append(out, path)
	}
	sort.Strings(out)
	return out
}

func TestChartValuesAreDocumentedKeys(t *testing.T) {
	for _, stack := range []struct {
		name    string
		secrets map[string]string
	}{{"dev", devSecrets}, {"prod", prodSecrets}} {
		rec := runStack(t, stack.name, stackConfig(t, stack.name, stack.secrets))
		for release, keys := range documentedKeys {
			documented := map[string]bool{}
			for _, k := range keys {
				documented[k] = true
			}
			r := reg(t, rec, tRelease, release)
			assert.Empty(t, undocumented(values(t, r), "", documented), "%s %s sets values its chart does not document", stack.name, release)
		}
	}
}
