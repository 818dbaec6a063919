package config_test

// The remaining classes of issue #33 (provenance, transport, values that
// undo hardening, workloads): one table per class, one rule per class in
// the loader; each case is a spelling no other case of its class covers.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
)

// asVault makes the base config's app the hardened Vault and returns its values.
func asVault(c obj) obj {
	app := at(c, "apps", 0)
	app["chart"] = obj{"repo": "https://helm.releases.hashicorp.com", "name": "vault", "version": "0.29.1"}
	app["vault"] = obj{}
	delete(app, "secretValues")
	v := obj{}
	app["values"] = v
	return v
}

// asWoodpecker adds Woodpecker as apps[1] and returns its values.
func asWoodpecker(c obj) obj {
	v := obj{}
	c["apps"] = append(c["apps"].([]any), obj{
		"name":       "woodpecker",
		"chart":      obj{"repo": "oci://ghcr.io/woodpecker-ci/helm", "name": "woodpecker", "version": "3.2.0"},
		"woodpecker": obj{"host": "https://ci.example.org", "forge": obj{"kind": "forgejo", "url": "https://forge.example.org"}},
		"values":     v,
	})
	return v
}

// set writes value at a dotted path of values, creating maps on the way.
func set(values obj, path string, value any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := values[k].(obj)
		if !ok {
			next = obj{}
			values[k] = next
		}
		values = next
	}
	values[keys[len(keys)-1]] = value
}

const schematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

func TestProvenance(t *testing.T) {
	cluster := func(c obj) obj { return at(c, "cluster") }
	runRefusals(t, []refusalCase{
		{"vault chart from a look-alike host", func(c obj) {
			asVault(c)
			at(c, "apps", 0, "chart")["repo"] = "https://helm.releases.hashicorp.com.evil.example"
		}, `milner:apps[0].chart.repo: "https://helm.releases.hashicorp.com.evil.example" is not where the vault chart is published (https://helm.releases.hashicorp.com)`},
		{"woodpecker chart from another registry", func(c obj) {
			asWoodpecker(c)
			at(c, "apps", 1, "chart")["repo"] = "oci://docker.io/woodpecker-ci/helm"
		}, `milner:apps[1].chart.repo: "oci://docker.io/woodpecker-ci/helm" is not where the woodpecker chart is published`},
		{"storage chart from the pages it never had", func(c obj) {
			c["storage"] = obj{"chart": obj{"repo": "https://rancher.github.io/local-path-provisioner", "name": "local-path-provisioner", "version": "0.0.33"}}
		}, `milner:storage.chart.repo: "https://rancher.github.io/local-path-provisioner" is not where the local-path-provisioner chart is published`},
		{"installer on docker hub by name", func(c obj) { cluster(c)["installImage"] = "docker.io/siderolabs/installer:v1.9.5" },
			`milner:cluster.installImage: "docker.io/siderolabs/installer:v1.9.5" is not a Talos installer as Sidero Labs publishes it`},
		{"installer on docker hub implicitly", func(c obj) { cluster(c)["installImage"] = "siderolabs/installer:v1.9.5" },
			`milner:cluster.installImage: "siderolabs/installer:v1.9.5" is not a Talos installer`},
		{"installer from a look-alike host", func(c obj) { cluster(c)["installImage"] = "ghcr.io.evil.example/siderolabs/installer:v1.9.5" },
			`milner:cluster.installImage: "ghcr.io.evil.example/siderolabs/installer:v1.9.5" is not a Talos installer`},
		{"installer from the factory without a schematic", func(c obj) { cluster(c)["installImage"] = "factory.talos.dev/installer/metal:v1.9.5" },
			`milner:cluster.installImage: "factory.talos.dev/installer/metal:v1.9.5" is not a Talos installer`},
		{"vault server image from another registry", func(c obj) { set(asVault(c), "server.image.repository", "quay.io/hashicorp/vault") },
			`milner:apps[0].values.server.image.repository: moves the image to "quay.io/hashicorp/vault": it is published as docker.io/hashicorp/vault`},
		{"vault agent image a look-alike repository", func(c obj) { set(asVault(c), "injector.agentImage.repository", "hashicorp-vault/vault") },
			`milner:apps[0].values.injector.agentImage.repository: moves the image to "hashicorp-vault/vault"`},
		{"woodpecker server registry swapped", func(c obj) { set(asWoodpecker(c), "server.image.registry", "ghcr.io") },
			`milner:apps[1].values.server.image.registry: moves the image to "ghcr.io/woodpeckerci/woodpecker-server"`},
		{"woodpecker agent registry inside the repository", func(c obj) {
			set(asWoodpecker(c), "agent.image.repository", "ghcr.io/woodpecker-ci/woodpecker-agent")
		}, `milner:apps[1].values.agent.image.repository: moves the image to "docker.io/ghcr.io/woodpecker-ci/woodpecker-agent"`},
	})
}

// TestProvenanceAcceptsThePublishedSources: the approved ways stay open: a
// mirror keeps the published coordinates, an image named with or without
// its registry, a factory installer, an installer pinned by digest
// anywhere (TestPinnedInstallersPass).
func TestProvenanceAcceptsThePublishedSources(t *testing.T) {
	c := baseConfig()
	v := asVault(c)
	set(v, "server.image.repository", "docker.io/hashicorp/vault")
	set(v, "injector.image.repository", "hashicorp/vault-k8s")
	at(c, "cluster")["installImage"] = "factory.talos.dev/installer/" + schematic + ":v1.9.5"
	c["chartMirrors"] = obj{"https://helm.releases.hashicorp.com": "https://charts.lan/hashicorp"}
	requireNoProblemFrom(t, c, "chart.repo", "image.repository", "installImage")
}

// requireNoProblemFrom loads c and requires that no problem names a path
// containing any of paths (other problems, such as missing TLS secrets,
// are not this test's).
func requireNoProblemFrom(t *testing.T, c obj, paths ...string) {
	t.Helper()
	_, err := config.Load(mapSource(raw(t, c)))
	if err == nil {
		return
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		for _, p := range paths {
			head, _, _ := strings.Cut(line, ": ")
			assert.NotContains(t, head, p, line)
		}
	}
}

func TestTransport(t *testing.T) {
	uri := func(u string) func(c obj) { return func(c obj) { at(c, "substrate", "libvirt")["uri"] = u } }
	const at = "milner:substrate.libvirt.uri: "
	runRefusals(t, []refusalCase{
		{"plain tcp to a host", uri("qemu+tcp://hv1.lan/system"), at + `"qemu+tcp://hv1.lan/system" speaks plain TCP to hv1.lan`},
		{"plain tcp in upper case", uri("QEMU+TCP://10.0.0.5/system"), at + `"QEMU+TCP://10.0.0.5/system" speaks plain TCP to 10.0.0.5`},
		{"plain tcp to a name that looks local", uri("qemu+tcp://127.0.0.1.nip.io/system"), at + `"qemu+tcp://127.0.0.1.nip.io/system" speaks plain TCP`},
		{"ssh without the host-key check", uri("qemu+ssh://root@hv1.lan/system?no_verify=1"), at + `"qemu+ssh://root@hv1.lan/system?no_verify=1" sets no_verify`},
		{"no_verify=0 still skips it for ssh", uri("qemu+ssh://root@hv1.lan/system?no_verify=0"), at + `"qemu+ssh://root@hv1.lan/system?no_verify=0" sets no_verify`},
		{"no_verify escaped", uri("qemu+tls://hv1.lan/system?no%5Fverify=1"), at + `"qemu+tls://hv1.lan/system?no%5Fverify=1" sets no_verify`},
		{"no_verify in upper case", uri("qemu+ssh://root@hv1.lan/system?NO_VERIFY=1"), at + `"qemu+ssh://root@hv1.lan/system?NO_VERIFY=1" sets no_verify`},
		{"known hosts ignored", uri("qemu+libssh2://root@hv1.lan/system?known_hosts_verify=ignore"), at + `"qemu+libssh2://root@hv1.lan/system?known_hosts_verify=ignore" sets known_hosts_verify=ignore`},
	})
}

// TestTransportAcceptsLocalTCPAndVerifiedSSH: tcp on the machine itself and
// ssh with its host key checked pass.
func TestTransportAcceptsLocalTCPAndVerifiedSSH(t *testing.T) {
	for _, u := range []string{"qemu+tcp://localhost/system", "qemu+tcp:///system", "qemu+ssh://root@hv1.lan/system?known_hosts_verify=normal"} {
		c := baseConfig()
		at(c, "substrate", "libvirt")["uri"] = u
		_, err := config.Load(mapSource(raw(t, c)))
		assert.NoError(t, err, u)
	}
}

func TestHardeningValues(t *testing.T) {
	const pem = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----\n"
	const ghToken = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	wp := func(path string, v any) func(c obj) { return func(c obj) { set(asWoodpecker(c), path, v) } }
	vault := func(path string, v any) func(c obj) { return func(c obj) { set(asVault(c), path, v) } }
	runRefusals(t, []refusalCase{
		// Shell quoting around flags.
		{"vault dev flag in single quotes", vault("server.extraArgs", "'-dev'"), `milner:apps[0].values.server.extraArgs: "'-dev'" is not one of the Vault server flags Milner allows there`},
		{"vault dev flag quoted inside", vault("server.extraArgs", `-log-level=info -d"e"v`), `milner:apps[0].values.server.extraArgs: "-d\"e\"v" is not one of the Vault server flags`},
		{"vault config flag behind a backslash", vault("server.extraArgs", `\-config=/tmp/plain.hcl`), `milner:apps[0].values.server.extraArgs: "\\-config=/tmp/plain.hcl" is not one of the Vault server flags`},
		// Environment variables that turn TLS verification off.
		{"vault skip verify in an env map", vault("server.extraEnvironmentVars.VAULT_SKIP_VERIFY", "true"),
			"milner:apps[0].values.server.extraEnvironmentVars.VAULT_SKIP_VERIFY: VAULT_SKIP_VERIFY=true turns TLS verification off"},
		{"node tls off in an env list", func(c obj) {
			set(asVault(c), "server.extraContainers", []any{obj{"name": "side", "env": []any{obj{"name": "NODE_TLS_REJECT_UNAUTHORIZED", "value": "0"}}}})
		}, "milner:apps[0].values.server.extraContainers[0].env[0].value: NODE_TLS_REJECT_UNAUTHORIZED=0 turns TLS verification off"},
		{"forge skip verify as a number", wp("server.env.WOODPECKER_FORGEJO_SKIP_VERIFY", 1),
			"milner:apps[1].values.server.env.WOODPECKER_FORGEJO_SKIP_VERIFY: WOODPECKER_FORGEJO_SKIP_VERIFY=1 turns TLS verification off"},
		{"git's no verify set to false", wp("agent.env.GIT_SSL_NO_VERIFY", "false"),
			"milner:apps[1].values.agent.env.GIT_SSL_NO_VERIFY: GIT_SSL_NO_VERIFY=false turns git's TLS verification off"},
		{"a chart key that skips verification", vault("injector.webhook.insecure_skip_verify", true),
			"milner:apps[0].values.injector.webhook.insecure_skip_verify: turns TLS verification off"},
		// Services exposed beyond the cluster.
		{"a NodePort service", vault("server.service.type", "NodePort"), "milner:apps[0].values.server.service.type: NodePort opens the Service on every node's address"},
		{"a LoadBalancer without vipRange", func(c obj) {
			delete(at(c, "network"), "vipRange")
			set(asVault(c), "ui.serviceType", "LoadBalancer")
		}, "milner:apps[0].values.ui.serviceType: LoadBalancer exposes the Service beyond the cluster, but the stack runs no load balancer (milner:network.vipRange"},
		{"host network", vault("server.hostNetwork", true), "milner:apps[0].values.server.hostNetwork: opens the app beyond the cluster network"},
		{"a host port in a list", vault("server.extraPorts", []any{obj{"containerPort": 8200, "hostPort": 8200}}), "milner:apps[0].values.server.extraPorts[0].hostPort: opens the app beyond the cluster network"},
		{"external IPs", vault("server.service.externalIPs", []any{"192.168.1.9"}), "milner:apps[0].values.server.service.externalIPs: opens the app beyond the cluster network"},
		// Woodpecker.
		{"pipelines in kube-system", wp("agent.env.WOODPECKER_BACKEND_K8S_NAMESPACE", "kube-system"),
			`milner:apps[1].values.agent.env.WOODPECKER_BACKEND_K8S_NAMESPACE: "kube-system" is a Kubernetes system namespace`},
		{"pipelines in another app's namespace", wp("agent.env.WOODPECKER_BACKEND_K8S_NAMESPACE", "vault"),
			`milner:apps[1].values.agent.env.WOODPECKER_BACKEND_K8S_NAMESPACE: "vault" is the namespace of milner:apps[0]`},
		{"agent secret to an outside server", wp("agent.env.WOODPECKER_SERVER", "ci.evil.example:9000"),
			`milner:apps[1].values.agent.env.WOODPECKER_SERVER: "ci.evil.example:9000" is not this release's server (woodpecker-server:9000)`},
		{"agent secret to a look-alike service name", wp("agent.env.WOODPECKER_SERVER", "woodpecker-server.evil.example:9000"),
			`milner:apps[1].values.agent.env.WOODPECKER_SERVER: "woodpecker-server.evil.example:9000" is not this release's server`},
		{"open registration", wp("server.env.WOODPECKER_OPEN", true), "milner:apps[1].values.server.env.WOODPECKER_OPEN: opens registration to every account of the forge"},
		{"privileged plugins", wp("server.env.WOODPECKER_PLUGINS_PRIVILEGED", "woodpeckerci/plugin-docker-buildx"),
			`milner:apps[1].values.server.env.WOODPECKER_PLUGINS_PRIVILEGED: "woodpeckerci/plugin-docker-buildx" runs these plugin images privileged`},
		// Private keys and tokens in plain values.
		{"a private key in a value", vault("server.extraSecret", pem), "milner:apps[0].values.server.extraSecret: holds a private key in plain text"},
		{"a token by its shape under an innocent key", vault("server.annotations.note", ghToken), "milner:apps[0].values.server.annotations.note: holds a token in plain text"},
		{"a password by its key", vault("postgresql.auth.password", "hunter2"), "milner:apps[0].values.postgresql.auth.password: is a credential in plain text"},
		{"a forge secret as an env value", wp("server.env.WOODPECKER_FORGEJO_SECRET", "s3cr3t"), "milner:apps[1].values.server.env.WOODPECKER_FORGEJO_SECRET: is a credential in plain text"},
		{"a password in the chart repository URL", func(c obj) { at(c, "apps", 0, "chart")["repo"] = "https://milner:hunter2@charts.example.org" },
			"milner:apps[0].chart.repo: carries a password in plain text (https://milner:xxxxx@charts.example.org)"},
		{"a token as the forge URL's user", func(c obj) {
			asWoodpecker(c)
			at(c, "apps", 1, "woodpecker", "forge")["url"] = "https://" + ghToken + "@forge.example.org"
		}, "milner:apps[1].woodpecker.forge.url: carries a credential as its user name"},
		{"a credential in a mirror", func(c obj) { c["chartMirrors"] = obj{"https://charts.example.org": "https://ci:hunter2@charts.lan/x"} },
			"milner:chartMirrors[https://charts.example.org]: carries a password in plain text"},
		{"a password in the libvirt URI", func(c obj) { at(c, "substrate", "libvirt")["uri"] = "qemu+ssh://root:hunter2@hv1.lan/system" },
			"milner:substrate.libvirt.uri: carries a password in plain text"},
	})
}

// TestLocalChartOutsideTheProject: a local chart must lie in the project
// directory, however its path reaches outside: absolute, through "..",
// through a symbolic link.
func TestLocalChartOutsideTheProject(t *testing.T) {
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "Chart.yaml"), []byte("apiVersion: v2\nname: x\nversion: 1.0.0\n"), 0o600))
	project := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(project, "vendored")))
	rel, err := filepath.Rel(project, outside)
	require.NoError(t, err)
	for name, path := range map[string]string{"absolute": outside, "through ..": rel, "through a symlink": "vendored"} {
		t.Run(name, func(t *testing.T) {
			c := baseConfig()
			localChart(path)(c)
			_, err := config.Load(rootSource{mapSource(raw(t, c)), project})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "milner:apps[0].chart.path: resolves to "+mustReal(t, outside)+", outside the project directory")
		})
	}
	t.Run("inside passes", func(t *testing.T) {
		c := baseConfig()
		localChart(testChart)(c)
		_, err := config.Load(mapSource(raw(t, c)))
		require.NoError(t, err)
	})
}

func mustReal(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	require.NoError(t, err)
	return r
}

func TestWorkloads(t *testing.T) {
	workloads := func(c obj) obj {
		w := obj{"quota": obj{"requests.cpu": "2", "requests.memory": "4Gi", "limits.cpu": "4", "limits.memory": "8Gi"}}
		c["workloads"] = w
		return w
	}
	edit := func(f func(w obj)) func(c obj) { return func(c obj) { f(workloads(c)) } }
	runRefusals(t, []refusalCase{
		{"workloads in kube-system", edit(func(w obj) { w["namespace"] = "kube-system" }), `milner:workloads.namespace: "kube-system" is a Kubernetes system namespace`},
		{"workloads under the kube- prefix", edit(func(w obj) { w["namespace"] = "kube-npcs" }), `milner:workloads.namespace: "kube-npcs" is a Kubernetes system namespace`},
		{"workloads privileged unacknowledged", edit(func(w obj) { w["podSecurity"] = "privileged" }), "milner:workloads.podSecurity: privileged admits pods that own their node"},
		{"an app privileged unacknowledged", func(c obj) { at(c, "apps", 0)["podSecurity"] = "privileged" }, "milner:apps[0].podSecurity: privileged admits pods that own their node"},
		{"default request above default limit in millicores", edit(func(w obj) { w["defaultRequest"] = obj{"cpu": "1500m"}; w["defaultLimit"] = obj{"cpu": "1"} }),
			"milner:workloads.defaultRequest[cpu]: 1500m is more than milner:workloads.defaultLimit[cpu] 1"},
		{"default limit above max, binary against decimal", edit(func(w obj) { w["defaultLimit"] = obj{"memory": "1Gi"}; w["max"] = obj{"memory": "1G"} }),
			"milner:workloads.defaultLimit[memory]: 1Gi is more than milner:workloads.max[memory] 1G"},
		{"quota requests above its limits", edit(func(w obj) { w["quota"].(obj)["requests.memory"] = "9000Mi" }),
			"milner:workloads.quota[requests.memory]: 9000Mi is more than milner:workloads.quota[limits.memory] 8Gi"},
		{"one default request above the whole quota", edit(func(w obj) { w["defaultRequest"] = obj{"cpu": "3"} }),
			"milner:workloads.defaultRequest[cpu]: 3 is more than milner:workloads.quota[requests.cpu] 2"},
		{"a node dedicated twice", edit(func(w obj) { w["dedicatedNodes"] = []any{"w-1", "w-1"} }), `milner:workloads.dedicatedNodes[1]: "w-1" is also dedicatedNodes[0]`},
		{"the only worker dedicated", edit(func(w obj) { w["dedicatedNodes"] = []any{"w-1"} }), "milner:workloads.dedicatedNodes: leaves no node for anything else"},
		{"a control plane that takes no pods dedicated", edit(func(w obj) { w["dedicatedNodes"] = []any{"cp-1"} }),
			`milner:workloads.dedicatedNodes[0]: "cp-1" is a control plane that takes no pods`},
		{"vault peers crowded out by the dedication", func(c obj) {
			at(c, "cluster")["allowSchedulingOnControlPlanes"] = true
			asVault(c)
			at(c, "apps", 0)["vault"] = obj{"replicas": 3}
			workloads(c)["dedicatedNodes"] = []any{"w-1", "cp-1"}
		}, "milner:apps[0].vault.replicas: 3 raft peers but 2 nodes take workloads"},
	})
}

// TestWorkloadsAcknowledgedAndConsistentPass: the acknowledgement admits
// privileged, and limits that agree pass.
func TestWorkloadsAcknowledgedAndConsistentPass(t *testing.T) {
	c := baseConfig()
	c["workloads"] = obj{
		"podSecurity": "privileged", "privilegedAcknowledged": true,
		"quota":          obj{"requests.cpu": "2", "requests.memory": "4Gi", "limits.cpu": "4", "limits.memory": "8Gi"},
		"defaultRequest": obj{"cpu": "100m", "memory": "128Mi"}, "defaultLimit": obj{"cpu": "1", "memory": "1Gi"},
		"max": obj{"cpu": "2000m", "memory": "1Gi"},
	}
	_, err := config.Load(mapSource(raw(t, c)))
	require.NoError(t, err)
}
