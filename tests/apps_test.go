package tests

// Whole-program tests of the apps layer: storage first, the hardened
// Vault, Woodpecker with its forge, the Evolved-NPCs reservation, a stack
// that starts at the apps layer, and the test-only waitForApps switch.

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/components/helmapp"
	"github.com/milner/milner/components/workloads"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config/configtest"
)

// reg returns one registration by type and name.
func reg(t testing.TB, rec *offline.Recorder, token, name string) offline.Registration {
	t.Helper()
	r, ok := rec.ByName(token, name)
	require.True(t, ok, "no %s %q", token, name)
	return r
}

// urnOf is the URN the engine knows a registration by (the mock's own URN
// field uses a fixed stack name): what parents and dependencies name.
func urnOf(r offline.Registration) string {
	return strings.Replace(r.URN, "urn:pulumi:mock::", "urn:pulumi:dev::", 1)
}

// plain turns a property value into plain Go values (secrets unwrapped).
func plain(v resource.PropertyValue) any {
	return v.MapRepl(nil, func(v resource.PropertyValue) (any, bool) {
		if v.IsSecret() {
			return plain(v.SecretValue().Element), true
		}
		return nil, false
	})
}

// values returns a release's chart values as plain Go values.
func values(t testing.TB, r offline.Registration) map[string]any {
	t.Helper()
	v, ok := plain(r.Inputs["values"]).(map[string]any)
	require.True(t, ok)
	return v
}

// at walks a dotted path of map keys.
func at(t testing.TB, m map[string]any, path string) any {
	t.Helper()
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		require.True(t, ok, "%s: %s is not a map", path, k)
		cur, ok = mm[k]
		require.True(t, ok, "%s: no %s", path, k)
	}
	return cur
}

// runErr runs the program and returns its error and recorder.
func runErr(cfg map[string]string) (*offline.Recorder, error) {
	return offline.Run(stacks.Program, "dev", cfg, slices.Sorted(maps.Keys(devSecrets))...)
}

func TestStorageIsInstalledBeforeEveryApp(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	storage := reg(t, rec, tRelease, "local-path-provisioner-release")
	v := values(t, storage)
	assert.Equal(t, false, at(t, v, "storageClass.create"), "the class is the program's, not the chart's")
	assert.Equal(t, stacks.LocalPathProvisioner, at(t, v, "storageClass.provisionerName"))
	assert.Equal(t, []any{map[string]any{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": []any{"/var/mnt/data/local-path-provisioner"}}}, at(t, v, "nodePathMap"))

	ns := reg(t, rec, tNamespace, "local-path-provisioner-ns")
	labels := plain(ns.Inputs["metadata"]).(map[string]any)["labels"].(map[string]any)
	assert.Equal(t, "privileged", labels["pod-security.kubernetes.io/enforce"], "helper pods mount host paths")
	assert.True(t, ns.Options.RetainOnDelete, "a namespace is never deleted with its PVCs")

	class := reg(t, rec, tStorageClass, "local-path-provisioner-class")
	assert.Equal(t, stacks.LocalPathProvisioner, class.Inputs["provisioner"].StringValue())
	assert.Equal(t, "Retain", class.Inputs["reclaimPolicy"].StringValue())
	assert.Equal(t, "WaitForFirstConsumer", class.Inputs["volumeBindingMode"].StringValue())
	meta := plain(class.Inputs["metadata"]).(map[string]any)
	assert.Equal(t, "local-path", meta["name"])
	assert.Equal(t, "true", meta["annotations"].(map[string]any)[stacks.DefaultClassAnnotation])

	for _, app := range []string{"vault-release", "woodpecker-release"} {
		r := reg(t, rec, tRelease, app)
		deps := strings.Join(r.Options.Dependencies, " ")
		assert.Contains(t, deps, "::local-path-provisioner-release", "%s waits for the provisioner", app)
		assert.Contains(t, deps, "::local-path-provisioner-class", "%s waits for the class", app)
	}
	assert.NotContains(t, strings.Join(storage.Options.Dependencies, " "), "::local-path-provisioner-class")

	for _, node := range []string{"cp-1", "cp-2", "cp-3"} {
		patches := reg(t, rec, tApply, node+"-apply").Inputs["configPatches"].ArrayValue()
		var mount struct {
			Machine struct {
				Kubelet struct {
					ExtraMounts []struct {
						Destination, Type, Source string
						Options                   []string
					} `json:"extraMounts"`
				} `json:"kubelet"`
			} `json:"machine"`
		}
		// The node's own patch is rendered into its machine configuration
		// (stacks.RenderNodeConfigs); the apply carries the other layers'.
		require.NotEmpty(t, patches, node)
		require.NoError(t, json.Unmarshal([]byte(patches[0].StringValue()), &mount))
		require.Len(t, mount.Machine.Kubelet.ExtraMounts, 1, node)
		m := mount.Machine.Kubelet.ExtraMounts[0]
		assert.Equal(t, "/var/mnt/data/local-path-provisioner", m.Source)
		assert.Equal(t, m.Source, m.Destination)
		assert.Equal(t, []string{"bind", "rshared", "rw"}, m.Options)
	}
}

func TestVaultIsHardened(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	r := reg(t, rec, tRelease, "vault-release")
	v := values(t, r)
	assert.Equal(t, false, at(t, v, "global.tlsDisable"))
	assert.Equal(t, false, at(t, v, "server.dev.enabled"))
	assert.Equal(t, false, at(t, v, "server.standalone.enabled"))
	assert.Equal(t, true, at(t, v, "server.ha.enabled"))
	assert.Equal(t, 3.0, at(t, v, "server.ha.replicas"))
	assert.Equal(t, true, at(t, v, "server.ha.raft.enabled"))
	hcl := at(t, v, "server.ha.raft.config").(string)
	assert.Contains(t, hcl, `tls_cert_file   = "/vault/userconfig/tls/tls.crt"`)
	assert.NotContains(t, hcl, "tls_disable")
	assert.Contains(t, hcl, `storage "raft"`)
	for _, peer := range []string{"vault-0", "vault-1", "vault-2"} {
		assert.Contains(t, hcl, `leader_api_addr     = "https://`+peer+`.vault-internal:8200"`)
	}
	assert.Equal(t, "local-path", at(t, v, "server.dataStorage.storageClass"))
	assert.Equal(t, true, at(t, v, "server.auditStorage.enabled"))
	assert.Equal(t, "local-path", at(t, v, "server.auditStorage.storageClass"))
	assert.Equal(t, "vault-tls", at(t, v, "server.volumes").([]any)[0].(map[string]any)["secret"].(map[string]any)["secretName"])
	assert.False(t, r.Inputs["values"].ContainsSecrets(), "the TLS key is never a Helm value")

	tls := reg(t, rec, tSecret, "vault-tls")
	assert.Equal(t, "kubernetes.io/tls", tls.Inputs["type"].StringValue())
	assert.True(t, tls.Inputs["stringData"].ContainsSecrets())
	data := plain(tls.Inputs["stringData"]).(map[string]any)
	assert.Equal(t, map[string]any{"tls.crt": devTLS.Cert, "tls.key": devTLS.Key, "ca.crt": devTLS.CA}, data)
	assert.Equal(t, "vault", plain(tls.Inputs["metadata"]).(map[string]any)["namespace"])
	assert.Contains(t, strings.Join(r.Options.Dependencies, " "), "::vault-tls", "the release follows the Secret its pods mount")
	assert.True(t, r.Options.RetainOnDelete)
}

func TestVaultDevModeIsRefusedBeforeAnything(t *testing.T) {
	cfg := patchKey(t, stackConfig(t, "dev", devSecrets), "milner:apps", func(v any) {
		v.([]any)[0].(map[string]any)["values"] = map[string]any{"server": map[string]any{"dev": map[string]any{"enabled": true}}}
	})
	rec, err := runErr(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:apps[0].values.server.dev.enabled: Vault dev mode")
	assert.Empty(t, rec.Registrations())

	noVault := patchKey(t, stackConfig(t, "dev", devSecrets), "milner:apps", func(v any) {
		delete(v.([]any)[0].(map[string]any), "vault")
	})
	_, err = runErr(noVault)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:apps[0].vault: is required for the vault chart")

	noTLS := maps.Clone(stackConfig(t, "dev", devSecrets))
	delete(noTLS, "milner:vaultTlsKey")
	_, err = runErr(noTLS)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:vaultTlsKey: secret is not set")
}

func TestWoodpeckerReadsItsForgeFromSecrets(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	r := reg(t, rec, tRelease, "woodpecker-release")
	v := values(t, r)
	assert.Equal(t, false, at(t, v, "server.createAgentSecret"))
	assert.Equal(t, []any{"woodpecker-server-env"}, at(t, v, "server.extraSecretNamesForEnvFrom"))
	assert.Equal(t, false, at(t, v, "agent.mapAgentSecret"))
	assert.Equal(t, []any{"woodpecker-agent-env"}, at(t, v, "agent.extraSecretNamesForEnvFrom"))
	assert.Equal(t, "true", at(t, v, "server.env.WOODPECKER_GITEA"))
	assert.Equal(t, devForgeURL, at(t, v, "server.env.WOODPECKER_GITEA_URL"))
	assert.Equal(t, "https://ci.milner.internal", at(t, v, "server.env.WOODPECKER_HOST"))
	assert.Equal(t, "local-path", at(t, v, "server.persistentVolume.storageClass"))
	assert.Equal(t, false, at(t, v, "agent.env.WOODPECKER_BACKEND_K8S_STORAGE_RWX"))
	assert.Equal(t, 1.0, at(t, v, "agent.replicaCount"), "the stack's own values merge over the profile")
	assert.False(t, r.Inputs["values"].ContainsSecrets())

	server := plain(reg(t, rec, tSecret, "woodpecker-server-env").Inputs["stringData"]).(map[string]any)
	assert.Equal(t, map[string]any{
		"WOODPECKER_AGENT_SECRET": "test-agent-secret",
		"WOODPECKER_GITEA_CLIENT": "test-forge-client",
		"WOODPECKER_GITEA_SECRET": "test-forge-secret",
	}, server)
	agent := plain(reg(t, rec, tSecret, "woodpecker-agent-env").Inputs["stringData"]).(map[string]any)
	assert.Equal(t, map[string]any{"WOODPECKER_AGENT_SECRET": "test-agent-secret"}, agent, "agents never see the forge's credentials")
}

// TestWoodpeckerWithoutForgeIsOff: the forge is the user's; a stack
// without one is valid, installs no Woodpecker, needs none of its secrets,
// and says so naming the key.
func TestWoodpeckerWithoutForgeIsOff(t *testing.T) {
	for name, edit := range map[string]func(app map[string]any){
		"no woodpecker section": func(app map[string]any) { delete(app, "woodpecker") },
		"no forge":              func(app map[string]any) { delete(app["woodpecker"].(map[string]any), "forge") },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := patchKey(t, stackConfig(t, "dev", devSecrets), "milner:apps", func(v any) { edit(v.([]any)[1].(map[string]any)) })
			for _, k := range []string{"milner:woodpeckerAgentSecret", "milner:woodpeckerForgeClient", "milner:woodpeckerForgeSecret"} {
				delete(cfg, k)
			}
			rec, err := runErr(cfg)
			require.NoError(t, err)
			for _, r := range rec.ByType(tRelease) {
				assert.NotEqual(t, "woodpecker-release", r.Name, "Woodpecker without a forge is installed")
			}
			_, found := rec.ByName(tSecret, "woodpecker-server-env")
			assert.False(t, found, "Woodpecker's Secret without Woodpecker")
			loaded, err := configtest.Load(cfg, "milner:vaultTlsCert", "milner:vaultTlsKey", "milner:vaultTlsCa")
			require.NoError(t, err)
			assert.Contains(t, strings.Join(loaded.Warnings, "\n"), "milner:apps[1].woodpecker.forge: is not set: Woodpecker is off")
		})
	}
}

func TestWoodpeckerRefusals(t *testing.T) {
	var err error
	inValues := patchKey(t, stackConfig(t, "dev", devSecrets), "milner:apps", func(v any) {
		v.([]any)[1].(map[string]any)["secretValues"] = map[string]any{"agent.env.WOODPECKER_AGENT_SECRET": "woodpeckerAgentSecret"}
	})
	_, err = runErr(inValues)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:apps[1].secretValues[agent.env.WOODPECKER_AGENT_SECRET]: secret values would land in Helm values")

	missing := maps.Clone(stackConfig(t, "dev", devSecrets))
	delete(missing, "milner:woodpeckerForgeSecret")
	_, err = runErr(missing)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:woodpeckerForgeSecret: secret is not set")
}

func TestWorkloadsReserveRoom(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	w := reg(t, rec, "milner:components:Workloads", "evolved-npcs")
	for token, name := range map[string]string{tNamespace: "evolved-npcs-ns", tQuota: "evolved-npcs-quota", tLimitRange: "evolved-npcs-limits", tPriorityClass: "evolved-npcs-priority"} {
		assert.Equal(t, urnOf(w), reg(t, rec, token, name).Parent, name)
	}
	quota := plain(reg(t, rec, tQuota, "evolved-npcs-quota").Inputs["spec"]).(map[string]any)["hard"]
	assert.Equal(t, map[string]any{"requests.cpu": "4", "requests.memory": "8Gi", "limits.cpu": "6", "limits.memory": "12Gi", "requests.storage": "20Gi", "pods": "40"}, quota)
	limits := plain(reg(t, rec, tLimitRange, "evolved-npcs-limits").Inputs["spec"]).(map[string]any)["limits"].([]any)[0].(map[string]any)
	assert.Equal(t, "Container", limits["type"])
	assert.Equal(t, map[string]any{"cpu": "100m", "memory": "128Mi"}, limits["defaultRequest"])
	assert.Equal(t, map[string]any{"cpu": "4", "memory": "8Gi"}, limits["max"])
	pc := reg(t, rec, tPriorityClass, "evolved-npcs-priority").Inputs
	assert.Equal(t, 1000.0, pc["value"].NumberValue())
	assert.Equal(t, "Never", pc["preemptionPolicy"].StringValue())
	assert.False(t, pc["globalDefault"].BoolValue())
	ns := plain(reg(t, rec, tNamespace, "evolved-npcs-ns").Inputs["metadata"]).(map[string]any)
	assert.Equal(t, "baseline", ns["labels"].(map[string]any)["pod-security.kubernetes.io/enforce"])

	// Dedicated nodes: labelled and tainted through Talos, the others untouched.
	dedicated := patchKey(t, stackConfig(t, "dev", devSecrets), "milner:workloads", func(v any) {
		v.(map[string]any)["dedicatedNodes"] = []any{"cp-3"}
	})
	// A dedicated node takes no Vault peer (its taint keeps them off), so
	// dev's three peers would not fit on the two nodes left: one peer here.
	dedicated = patchKey(t, dedicated, "milner:apps", func(v any) {
		v.([]any)[0].(map[string]any)["vault"].(map[string]any)["replicas"] = 1
	})
	rec = runStack(t, "dev", dedicated)
	last := func(node string) string {
		p := reg(t, rec, tApply, node+"-apply").Inputs["configPatches"].ArrayValue()
		return p[len(p)-1].StringValue()
	}
	assert.JSONEq(t, `{"machine":{"nodeLabels":{"milner.io/workloads":"evolved-npcs"},"nodeTaints":{"milner.io/workloads":"evolved-npcs:NoSchedule"}}}`, last("cp-3"))
	assert.NotContains(t, last("cp-1"), "nodeTaints")

	all := patchKey(t, stackConfig(t, "dev", devSecrets), "milner:workloads", func(v any) {
		v.(map[string]any)["dedicatedNodes"] = []any{"cp-1", "cp-2", "cp-9"}
	})
	_, err := runErr(all)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `milner:workloads.dedicatedNodes[2]: "cp-9" is not a node of milner:nodes`)
}

// existingCluster is a stack that starts at the apps layer.
func existingCluster(t testing.TB) map[string]string {
	t.Helper()
	dev := stackConfig(t, "dev", devSecrets)
	cfg := map[string]string{"milner:startAt": "apps", "milner:kubeconfig": "apiVersion: v1\nkind: Config\n"}
	for _, k := range []string{"milner:apps", "milner:storage", "milner:workloads"} {
		cfg[k] = dev[k]
	}
	for k := range devSecrets {
		cfg[k] = dev[k]
	}
	// No milner:loadBalancer.pool here, so no load balancer: dev's exposed
	// Vault would be refused (TestExposeRefusals "no load balancer").
	return patchKey(t, cfg, "milner:apps", func(v any) {
		for _, a := range v.([]any) {
			delete(a.(map[string]any), "expose")
		}
	})
}

func TestStartAtAppsRunsOnAnExistingCluster(t *testing.T) {
	cfg := existingCluster(t)
	rec, err := offline.Run(stacks.Program, "apps", cfg, append(slices.Sorted(maps.Keys(devSecrets)), "milner:kubeconfig")...)
	require.NoError(t, err)
	for _, r := range rec.Registrations() {
		assert.False(t, strings.HasPrefix(r.Type, "talos:") || strings.HasPrefix(r.Type, "libvirt:") || strings.HasPrefix(r.Type, "proxmoxve:"), "%s %s", r.Type, r.Name)
	}
	assert.Empty(t, rec.Invokes(), "no Talos health check on an existing cluster")
	k8s := reg(t, rec, tK8sProvider, "milner-k8s")
	assert.True(t, k8s.Inputs["kubeconfig"].IsSecret(), "the kubeconfig stays secret")
	assert.Len(t, rec.ByType(tRelease), 3)

	missing := maps.Clone(cfg)
	delete(missing, "milner:kubeconfig")
	_, err = offline.Run(stacks.Program, "apps", missing, slices.Sorted(maps.Keys(devSecrets))...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:kubeconfig: secret is not set (needed by startAt apps)")

	extra := maps.Clone(cfg)
	extra["milner:nodes"] = stackConfig(t, "dev", nil)["milner:nodes"]
	extra["milner:cluster"] = `{"name":"home","vip":"10.0.0.1"}`
	_, err = offline.Run(stacks.Program, "apps", extra, append(slices.Sorted(maps.Keys(devSecrets)), "milner:kubeconfig")...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:nodes: is not used when milner:startAt is apps")
	assert.Contains(t, err.Error(), "milner:cluster.vip: is not used when milner:startAt is apps")
}

func TestWaitForAppsIsOnByDefaultAndTestOnlyOff(t *testing.T) {
	// quotaAnnotations are the ResourceQuota's annotations: the provider
	// waits for its status unless pulumi.com/skipAwait says otherwise.
	quotaAnnotations := func(rec *offline.Recorder) any {
		return plain(reg(t, rec, tQuota, "evolved-npcs-quota").Inputs["metadata"]).(map[string]any)["annotations"]
	}
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	for _, r := range rec.ByType(tRelease) {
		assert.True(t, r.Inputs["atomic"].BoolValue(), r.Name)
		assert.False(t, r.Inputs["skipAwait"].BoolValue(), r.Name)
	}
	assert.Nil(t, quotaAnnotations(rec), "the quota waits for its status by default")
	cfg := stackConfig(t, "dev", devSecrets)
	cfg["milner:waitForApps"] = "false"
	rec = runStack(t, "dev", cfg)
	require.Len(t, rec.ByType(tRelease), 4)
	for _, r := range rec.ByType(tRelease) {
		assert.True(t, r.Inputs["skipAwait"].BoolValue(), r.Name)
		assert.False(t, r.Inputs["atomic"].BoolValue(), "%s: Helm's atomic implies waiting", r.Name)
	}
	assert.Equal(t, map[string]any{"pulumi.com/skipAwait": "true"}, quotaAnnotations(rec))
}

func TestAppRenameAliasesEveryChild(t *testing.T) {
	cfg := patchKey(t, stackConfig(t, "dev", devSecrets), "milner:apps", func(v any) {
		w := v.([]any)[1].(map[string]any)
		w["name"], w["releaseName"], w["previousNames"] = "ci", "woodpecker", []any{"woodpecker"}
	})
	rec := runStack(t, "dev", cfg)
	for token, name := range map[string]string{helmapp.Type: "ci", tRelease: "ci-release", tNamespace: "ci-ns", tSecret: "ci-server-env"} {
		assert.Equal(t, 1, reg(t, rec, token, name).Options.Aliases, name)
	}
}

// TestWorkloadsTypeTokenIsPinned: the token is part of every child's URN.
func TestWorkloadsTypeTokenIsPinned(t *testing.T) {
	assert.Equal(t, "milner:components:Workloads", workloads.Type)
}
