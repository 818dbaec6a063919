package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config/configtest"
)

// TestAppsLayerRefusals: each bad apps-layer setting is refused before
// anything registers, naming its config path.
func TestAppsLayerRefusals(t *testing.T) {
	workloads := func(c obj) obj {
		w := obj{"quota": obj{"requests.cpu": "2", "requests.memory": "4Gi"}}
		c["workloads"] = w
		return w
	}
	for _, tc := range []struct {
		name string
		edit func(c obj)
		want string
	}{
		{"start at talos", func(c obj) { c["startAt"] = "talos" }, `milner:startAt: unknown start "talos" (want substrate, or apps on an existing cluster)`},
		{"waitForApps not a bool", func(c obj) { c["waitForApps"] = "maybe" }, `milner:waitForApps: "maybe" is not true or false`},
		{"storage path off /var", func(c obj) { c["storage"] = obj{"path": "/opt/local-path"} }, `milner:storage.path: "/opt/local-path" is not an absolute path under /var`},
		{"storage reclaim policy", func(c obj) { c["storage"] = obj{"reclaimPolicy": "Keep"} }, `milner:storage.reclaimPolicy: unknown reclaim policy "Keep"`},
		{"storage chart unpinned", func(c obj) {
			c["storage"] = obj{"chart": obj{"repo": "oci://ghcr.io/rancher/local-path-provisioner/charts", "name": "local-path-provisioner", "version": "0.0.x"}}
		}, `milner:storage.chart.version: "0.0.x" is not a pinned chart version`},
		{"storage typo", func(c obj) { c["storage"] = obj{"storageClas": "x"} }, `milner:storage: unknown key "storageClas"`},
		{"pod security level", func(c obj) { at(c, "apps", 0)["podSecurity"] = "open" }, `milner:apps[0].podSecurity: unknown level "open"`},
		{"namespace clash", func(c obj) { workloads(c)["namespace"] = "vault" }, `milner:workloads.namespace: "vault" is also the namespace of milner:apps[0].namespace`},
		{"quota without memory", func(c obj) { workloads(c)["quota"] = obj{"requests.cpu": "2"} }, "milner:workloads.quota: requests.memory is required"},
		{"quota unknown resource", func(c obj) { workloads(c)["quota"].(obj)["gpus"] = "1" }, "milner:workloads.quota[gpus]: unknown resource"},
		{"quota not a quantity", func(c obj) { workloads(c)["quota"].(obj)["requests.cpu"] = "two" }, `milner:workloads.quota[requests.cpu]: "two" is not a Kubernetes quantity`},
		{"priority too high", func(c obj) { workloads(c)["priority"] = 2000000000 }, "milner:workloads.priority: 2000000000 is outside 1..1000000000"},
		{"preemption policy", func(c obj) { workloads(c)["preemptionPolicy"] = "Always" }, `milner:workloads.preemptionPolicy: unknown policy "Always"`},
		{"vault section on another chart", func(c obj) { at(c, "apps", 0)["vault"] = obj{} }, `milner:apps[0].vault: is set but the chart is "demo", not vault`},
		{"woodpecker section on another chart", func(c obj) { at(c, "apps", 0)["woodpecker"] = obj{} }, `milner:apps[0].woodpecker: is set but the chart is "demo", not woodpecker`},
		{"start at apps, stop before", func(c obj) {
			for _, k := range []string{"cluster", "substrate", "network", "nodes"} {
				delete(c, k)
			}
			c["startAt"], c["stopAfter"] = "apps", "talos"
		}, `milner:stopAfter: "talos" is before milner:startAt apps`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := baseConfig()
			tc.edit(c)
			r := raw(t, c)
			r["milner:kubeconfig"] = "apiVersion: v1"
			_, err := configtest.Load(r, "milner:vaultToken", "milner:kubeconfig")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestVaultProfileRefusesOwnedValues: the hardened Vault's values cannot be
// overridden from the stack, each refusal naming the value's path.
func TestVaultProfileRefusesOwnedValues(t *testing.T) {
	c := baseConfig()
	app := at(c, "apps", 0)
	app["chart"] = obj{"repo": "https://helm.releases.hashicorp.com", "name": "vault", "version": "0.29.1"}
	app["vault"] = obj{"replicas": 9}
	app["values"] = obj{"global": obj{"tlsDisable": true}, "server": obj{"dev": obj{"enabled": true}, "standalone": obj{"enabled": true}}}
	r := raw(t, c)
	for _, k := range []string{"vaultTlsCert", "vaultTlsKey", "vaultTlsCa"} {
		r["milner:"+k] = "pem"
	}
	_, err := configtest.Load(r, "milner:vaultToken", "milner:vaultTlsCert", "milner:vaultTlsKey", "milner:vaultTlsCa")
	require.Error(t, err)
	for _, want := range []string{
		"milner:apps[0].vault.replicas: 9 is outside 1..7",
		"milner:apps[0].values.global.tlsDisable: is set by Milner's hardened Vault",
		"milner:apps[0].values.server.dev.enabled: Vault dev mode",
		"milner:apps[0].values.server.standalone: is set by Milner's hardened Vault",
	} {
		assert.Contains(t, err.Error(), want)
	}
}
