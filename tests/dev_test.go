// Package tests runs each committed Pulumi.<stack>.yaml through
// stacks.Program under a recording mock and asserts the contracts the seeds
// set: what is protected, what may be replaced, how Talos applies, which
// outputs are secret, and that a version bump moves nothing at the substrate.
package tests

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/components/helmapp"
	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/components/talosnode"
	"github.com/milner/milner/components/workloads"
	"github.com/milner/milner/internal/applymode"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/offlinetest"
	"github.com/milner/milner/tests/testpki"
)

// Type tokens the tests refer to.
const (
	tPool          = "libvirt:index/pool:Pool"
	tNetwork       = "libvirt:index/network:Network"
	tVolume        = "libvirt:index/volume:Volume"
	tDomain        = "libvirt:index/domain:Domain"
	tApply         = "talos:machine/configurationApply:ConfigurationApply"
	tBootstrap     = "talos:machine/bootstrap:Bootstrap"
	tSecrets       = "talos:machine/secrets:Secrets"
	tKubeconfig    = "talos:cluster/kubeconfig:Kubeconfig"
	tRelease       = "kubernetes:helm.sh/v3:Release"
	tK8sProvider   = "pulumi:providers:kubernetes"
	tLvProvider    = "pulumi:providers:libvirt"
	tNamespace     = "kubernetes:core/v1:Namespace"
	tIPPool        = "kubernetes:metallb.io/v1beta1:IPAddressPool"
	tL2Adv         = "kubernetes:metallb.io/v1beta1:L2Advertisement"
	tSecret        = "kubernetes:core/v1:Secret"
	tStorageClass  = "kubernetes:storage.k8s.io/v1:StorageClass"
	tQuota         = "kubernetes:core/v1:ResourceQuota"
	tLimitRange    = "kubernetes:core/v1:LimitRange"
	tPriorityClass = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
)

// devTLS is the dev stack's Vault listener certificate (release and
// namespace "vault", exposed as vault.milner.internal on dev and
// vault.home.arpa on prod), key and CA: Load checks them as Vault will use them.
var devTLS = testpki.Valid(append(config.VaultTLSNames("vault", "vault"), "vault.milner.internal", "vault.home.arpa")...)

// devSecrets are the secret keys the dev stack needs, with test values.
var devSecrets = map[string]string{
	"milner:woodpeckerAgentSecret": "test-agent-secret",
	"milner:woodpeckerForgeClient": "test-forge-client",
	"milner:woodpeckerForgeSecret": "test-forge-secret",
	"milner:vaultTlsCert":          devTLS.Cert,
	"milner:vaultTlsKey":           devTLS.Key,
	"milner:vaultTlsCa":            devTLS.CA,
}

// stackConfig reads a committed stack file plus the given secrets.
func stackConfig(t testing.TB, stack string, secrets map[string]string) map[string]string {
	t.Helper()
	cfg, err := offlinetest.ReadStackConfig("../Pulumi." + stack + ".yaml")
	require.NoError(t, err)
	maps.Copy(cfg, secrets)
	if stack == "dev" {
		// The committed dev stack has no forge (Woodpecker off: the forge
		// is the user's); these tests run it as a user with one does.
		cfg = patchKey(t, cfg, "milner:apps", func(v any) {
			for _, a := range v.([]any) {
				if w, ok := a.(map[string]any)["woodpecker"].(map[string]any); ok {
					w["forge"] = map[string]any{"kind": "gitea", "url": devForgeURL}
				}
			}
		})
	}
	return cfg
}

// devForgeURL is the forge the tests' dev stack names.
const devForgeURL = "https://git.milner.internal"

// runStack runs the program on cfg, with every test secret key marked
// secret, and fails the test on error.
func runStack(t testing.TB, stack string, cfg map[string]string) *offline.Recorder {
	t.Helper()
	secretKeys := slices.Sorted(maps.Keys(devSecrets))
	secretKeys = append(secretKeys, slices.Sorted(maps.Keys(prodSecrets))...)
	rec, err := offline.Run(stacks.Program, stack, cfg, secretKeys...)
	require.NoError(t, err)
	return rec
}

// patchKey returns a copy of cfg with one object-valued key changed by edit,
// which changes the decoded value in place.
func patchKey(t testing.TB, cfg map[string]string, key string, edit func(v any)) map[string]string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(cfg[key]), &v))
	edit(v)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	out := maps.Clone(cfg)
	out[key] = string(b)
	return out
}

// oneVaultPeer sets the dev stack's Vault to one raft peer: config refuses
// more peers than nodes that take workloads (vault-helm places one per node).
func oneVaultPeer(t testing.TB, cfg map[string]string) map[string]string {
	return patchKey(t, cfg, "milner:apps", func(v any) {
		for _, a := range v.([]any) {
			if vault, ok := a.(map[string]any)["vault"].(map[string]any); ok {
				vault["replicas"] = 1
			}
		}
	})
}

// names returns the logical names of regs.
func names(regs []offline.Registration) []string {
	var out []string
	for _, r := range regs {
		out = append(out, r.Name)
	}
	return out
}

func TestDevCountsPerType(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	assert.Equal(t, map[string]int{
		substrate.LibvirtType: 1,
		tLvProvider:           1,
		tPool:                 1,
		tNetwork:              1,
		tVolume:               7, // boot media + (os, data) x 3
		tDomain:               3,
		tSecrets:              1,
		talosnode.Type:        3,
		tApply:                3,
		tBootstrap:            1,
		tKubeconfig:           1,
		tK8sProvider:          1,
		helmapp.Type:          4, // storage, load balancer, vault, woodpecker
		tIPPool:               1, // MetalLB's pool: milner:network.vipRange
		tL2Adv:                1,
		tRelease:              4, // storage, load balancer, vault, woodpecker
		tNamespace:            5, // one per app (storage and load balancer too), and the workloads'
		tSecret:               3, // Vault's TLS, Woodpecker's server and agent env
		tStorageClass:         1,
		workloads.Type:        1,
		tQuota:                1,
		tLimitRange:           1,
		tPriorityClass:        1,
	}, offlinetest.Counts(rec))
}

func TestDevLogicalNames(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	for token, want := range map[string][]string{
		tVolume: {
			"milner-dev-boot",
			"milner-dev-cp-1-data", "milner-dev-cp-1-os",
			"milner-dev-cp-2-data", "milner-dev-cp-2-os",
			"milner-dev-cp-3-data", "milner-dev-cp-3-os",
		},
		tDomain:        {"milner-dev-cp-1", "milner-dev-cp-2", "milner-dev-cp-3"},
		tPool:          {"milner-dev-pool"},
		tNetwork:       {"milner-dev-net"},
		tSecrets:       {"milner-dev-secrets"},
		talosnode.Type: {"cp-1", "cp-2", "cp-3"},
		tApply:         {"cp-1-apply", "cp-2-apply", "cp-3-apply"},
		tBootstrap:     {"milner-dev-bootstrap"},
		tKubeconfig:    {"milner-dev-kubeconfig"},
		helmapp.Type:   {"local-path-provisioner", "metallb", "vault", "woodpecker"},
		tRelease:       {"local-path-provisioner-release", "metallb-release", "vault-release", "woodpecker-release"},
		tNamespace:     {"evolved-npcs-ns", "local-path-provisioner-ns", "metallb-ns", "vault-ns", "woodpecker-ns"},
		tSecret:        {"vault-tls", "woodpecker-agent-env", "woodpecker-server-env"},
		tStorageClass:  {"local-path-provisioner-class"},
		workloads.Type: {"evolved-npcs"},
	} {
		assert.Equal(t, want, names(rec.ByType(token)), token)
	}
}

// TestTypeTokensArePinned pins the component type tokens: each is part of
// every child's URN, so changing one orphans that layer in state.
func TestTypeTokensArePinned(t *testing.T) {
	assert.Equal(t, "milner:components:LibvirtSubstrate", substrate.LibvirtType)
	assert.Equal(t, "milner:components:TalosNode", talosnode.Type)
	assert.Equal(t, "milner:components:HelmApp", helmapp.Type)
}

func TestDevSubstrateProtectAndReplacePolicy(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	for _, r := range rec.Registrations() {
		switch r.Type {
		case tPool, tNetwork, tVolume:
			assert.True(t, r.Options.Protect, "%s %s must be protected", r.Type, r.Name)
		}
		if r.Type == tDomain {
			assert.Equal(t, []string{"*"}, r.Options.ReplaceOnChanges, r.Name)
			assert.True(t, r.Options.DeleteBeforeReplace, r.Name)
			assert.False(t, r.Options.Protect, "the domain is the disposable resource: %s", r.Name)
		} else {
			assert.Empty(t, r.Options.ReplaceOnChanges, "only domains may carry replaceOnChanges: %s %s", r.Type, r.Name)
			// The OS volume's one replace (--os-disk) reuses its libvirt name.
			isOS := r.Type == tVolume && strings.HasSuffix(r.Name, "-os")
			assert.Equal(t, isOS, r.Options.DeleteBeforeReplace, "only domains and OS volumes delete before replace: %s %s", r.Type, r.Name)
		}
	}
}

func TestDevDisksAreSeparateFromDomains(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	for _, d := range rec.ByType(tDomain) {
		disks := d.Inputs["disks"].ArrayValue()
		require.Len(t, disks, 2, d.Name)
		for i, suffix := range []string{"-os", "-data"} {
			assert.Equal(t, d.Name+suffix+"-id", disks[i].ObjectValue()["volumeId"].StringValue(), "%s disk %d", d.Name, i)
		}
		assert.Equal(t, d.Name, d.Inputs["name"].StringValue(), "domain names are explicit and stable")
	}
}

func TestDevParents(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	parentType := func(r offline.Registration) string {
		// urn:pulumi:<stack>::<project>::<type chain>::<name>
		parts := strings.Split(r.Parent, "::")
		require.GreaterOrEqual(t, len(parts), 4, "%s %s has parent %q", r.Type, r.Name, r.Parent)
		chain := strings.Split(parts[2], "$")
		return chain[len(chain)-1]
	}
	for token, want := range map[string]string{
		tLvProvider: substrate.LibvirtType, tPool: substrate.LibvirtType, tNetwork: substrate.LibvirtType,
		tVolume: substrate.LibvirtType, tDomain: substrate.LibvirtType,
		tApply: talosnode.Type, tRelease: helmapp.Type,
	} {
		for _, r := range rec.ByType(token) {
			assert.Equal(t, want, parentType(r), "%s %s", r.Type, r.Name)
		}
	}
	for _, r := range rec.ByType(tDomain) {
		chain := strings.Split(strings.Split(r.Provider, "::")[2], "$")
		assert.Equal(t, tLvProvider, chain[len(chain)-1], "domain %s uses the explicit provider", r.Name)
	}
	for _, r := range rec.ByType(tRelease) {
		assert.Contains(t, r.Provider, "::milner-dev-k8s::", "release %s uses the cluster's explicit provider", r.Name)
	}
}

func TestDevTalosApplyPolicy(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	applies := rec.ByType(tApply)
	require.Len(t, applies, 3)
	for _, a := range applies {
		assert.Equal(t, "staged_if_needing_reboot", a.Inputs["applyMode"].StringValue(), a.Name)
		onDestroy := a.Inputs["onDestroy"].ObjectValue()
		assert.False(t, onDestroy["reset"].BoolValue(), "%s must never reset the node", a.Name)
		assert.False(t, onDestroy["reboot"].BoolValue(), a.Name)
		// The machine config is secret material.
		assert.True(t, a.Inputs["machineConfigurationInput"].ContainsSecrets(), a.Name)
	}
	boots := rec.ByType(tBootstrap)
	require.Len(t, boots, 1, "exactly one bootstrap")
	assert.Equal(t, "milner-dev-bootstrap", boots[0].Name, "one cluster-level bootstrap")
	assert.Equal(t, "10.73.0.11", boots[0].Inputs["node"].StringValue(), "dialled on the first control plane")
}

func TestDevTalosPatch(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	patch := nodePatch(t, rec, "cp-2")
	m := patch.Machine
	assert.Equal(t, "cp-2", m.Network.Hostname)
	require.Len(t, m.Network.Interfaces, 1)
	assert.Equal(t, "52:54:00:73:00:12", m.Network.Interfaces[0].DeviceSelector["hardwareAddr"])
	assert.Equal(t, []string{"10.73.0.12/24"}, m.Network.Interfaces[0].Addresses)
	assert.Equal(t, "10.73.0.240", m.Network.Interfaces[0].VIP["ip"])
	assert.Equal(t, "/dev/vda", m.Install["disk"])
	assert.Equal(t, "ghcr.io/siderolabs/installer:"+stackCluster(t, "dev").TalosVersion, m.Install["image"])
	require.Len(t, m.Disks, 1)
	assert.Equal(t, "/dev/vdb", m.Disks[0].Device)
}

// awaitSecret awaits an output in the test goroutine and reports its value and secretness.
func awaitSecret(t *testing.T, o pulumi.Output) (any, bool) {
	t.Helper()
	res, err := internals.UnsafeAwaitOutput(context.Background(), o)
	require.NoError(t, err)
	require.True(t, res.Known)
	return res.Value, res.Secret
}

func TestDevSecretsAreSecret(t *testing.T) {
	var cluster *stacks.Cluster
	rec, err := offline.Run(func(ctx *pulumi.Context) error {
		cfg, err := config.Load(ctx)
		if err != nil {
			return err
		}
		cluster, err = stacks.Deploy(ctx, cfg)
		return err
	}, "dev", stackConfig(t, "dev", devSecrets), slices.Sorted(maps.Keys(devSecrets))...)
	require.NoError(t, err)
	require.NotNil(t, cluster.Talos)

	kc, secret := awaitSecret(t, cluster.Talos.Kubeconfig)
	assert.True(t, secret, "kubeconfig must be secret")
	assert.Contains(t, kc, "kind: Config")
	_, secret = awaitSecret(t, cluster.Talos.Talosconfig)
	assert.True(t, secret, "talosconfig must be secret")
	_, secret = awaitSecret(t, cluster.Talos.HealthyKubeconfig)
	assert.True(t, secret, "the gated kubeconfig must stay secret")

	s, ok := rec.ByName(tSecrets, "milner-dev-secrets")
	require.True(t, ok)
	assert.True(t, s.Options.Protect, "the cluster secrets are created once and protected")
	assert.ElementsMatch(t, []string{"machineSecrets", "clientConfiguration"}, s.Options.AdditionalSecretOutputs)

	// The Woodpecker agent secret reaches the agents only through a
	// Kubernetes Secret, as a secret input; never through Helm values.
	w, ok := rec.ByName(tSecret, "woodpecker-agent-env")
	require.True(t, ok)
	data := w.Inputs["stringData"]
	require.True(t, data.ContainsSecrets(), "the Secret's data must be a secret input")
	assert.Equal(t, "test-agent-secret", data.SecretValue().Element.ObjectValue()["WOODPECKER_AGENT_SECRET"].StringValue())
	release, ok := rec.ByName(tRelease, "woodpecker-release")
	require.True(t, ok)
	assert.False(t, release.Inputs["values"].ContainsSecrets(), "no secret in Woodpecker's Helm values")
}

func TestDevHealthGateOrdersApps(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	health := offlinetest.InvokesOf(rec, "talos:cluster/getHealth:getHealth")
	require.Len(t, health, 1, "one health check between the Talos layer and the apps")
	var cps []string
	for _, v := range health[0].Args["controlPlaneNodes"].ArrayValue() {
		cps = append(cps, v.StringValue())
	}
	assert.Equal(t, []string{"10.73.0.11", "10.73.0.12", "10.73.0.13"}, cps)
}

func TestDevHelmReleases(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	for name, want := range map[string]struct {
		chart, version, ns string
		retain             bool
	}{
		"vault-release":                  {"vault", "0.29.1", "vault", true},
		"local-path-provisioner-release": {"oci://ghcr.io/rancher/local-path-provisioner/charts/local-path-provisioner", "0.0.33", "local-path-storage", false},
		"woodpecker-release":             {"oci://ghcr.io/woodpecker-ci/helm/woodpecker", "3.2.0", "woodpecker", false},
	} {
		r, ok := rec.ByName(tRelease, name)
		require.True(t, ok, name)
		assert.Equal(t, strings.TrimSuffix(name, "-release"), r.Inputs["name"].StringValue(), "fixed release name")
		assert.False(t, r.Inputs["createNamespace"].BoolValue(), "the app owns its namespace, created with its labels first")
		assert.Equal(t, want.chart, r.Inputs["chart"].StringValue())
		assert.Equal(t, want.version, r.Inputs["version"].StringValue())
		assert.Equal(t, want.ns, r.Inputs["namespace"].StringValue())
		assert.True(t, r.Inputs["atomic"].BoolValue(), "upgrades roll back on failure")
		assert.Equal(t, want.retain, r.Options.RetainOnDelete, name)
		assert.False(t, r.Options.Protect, name)
	}
	k8s := rec.ByType(tK8sProvider)
	require.Len(t, k8s, 1)
	assert.Equal(t, "milner-dev", k8s[0].Inputs["clusterIdentifier"].StringValue(), "a rotated kubeconfig must not replace the releases")
}

// substrateInputs returns, by name, the inputs of every pool, network,
// volume and domain that the engine diffs: inputs a resource lists in
// ignoreChanges never plan an update or a replace.
func substrateInputs(rec *offline.Recorder) map[string]resource.PropertyMap {
	out := map[string]resource.PropertyMap{}
	for _, token := range []string{tPool, tNetwork, tVolume, tDomain} {
		for _, r := range rec.ByType(token) {
			in := r.Inputs.Copy()
			for _, ignored := range r.Options.IgnoreChanges {
				delete(in, resource.PropertyKey(ignored))
			}
			out[token+"::"+r.Name] = in
		}
	}
	return out
}

func TestTalosVersionBumpTouchesNoSubstrate(t *testing.T) {
	base := stackConfig(t, "dev", devSecrets)
	from := stackCluster(t, "dev").TalosVersion
	to := nextPatch(t, from)
	bumped := patchKey(t, base, "milner:cluster", func(v any) { v.(map[string]any)["talosVersion"] = to })
	before, after := runStack(t, "dev", base), runStack(t, "dev", bumped)

	assert.Equal(t, substrateInputs(before), substrateInputs(after), "a Talos version bump must not change any volume, domain, pool or network input")
	// The boot media's source follows the version but only seeds new disks.
	boot, ok := after.ByName(tVolume, "milner-dev-boot")
	require.True(t, ok)
	assert.Equal(t, []string{"source"}, boot.Options.IgnoreChanges)
	// The secrets bundle is made for the config contract, which a Talos
	// version bump does not touch.
	b, a := before.ByType(tSecrets), after.ByType(tSecrets)
	require.Len(t, a, 1)
	assert.Contains(t, a[0].Options.IgnoreChanges, "talosVersion", "the secrets bundle ignores the contract it was created with")
	assert.Equal(t, "v1.9", a[0].Inputs["talosVersion"].StringValue())
	assert.Equal(t, b[0].Inputs, a[0].Inputs)
	// The bump changes exactly one thing of a node's config: the installer
	// image that a new install uses. The generator keeps the fixed contract:
	// an up upgrades no running node (that is `milner upgrade`).
	bc, ac := nodeConfigInvoke(t, before, "cp-1"), nodeConfigInvoke(t, after, "cp-1")
	assert.Equal(t, "v1.9", ac.Contract)
	assert.Equal(t, bc.Contract, ac.Contract, "the config contract is fixed")
	assert.Equal(t, strings.Replace(bc.Patches[0], "installer:"+from, "installer:"+to, 1), ac.Patches[0], "only the installer image follows the version")
	assert.NotEqual(t, bc.Patches[0], ac.Patches[0])
}

func TestLayerStop(t *testing.T) {
	for _, tc := range []struct {
		stop      string
		forbidden []string
		want      []string
	}{
		{"substrate", []string{"talos:", "kubernetes:", talosnode.Type, helmapp.Type, tK8sProvider}, []string{tDomain}},
		{"talos", []string{"kubernetes:", helmapp.Type, tK8sProvider}, []string{tDomain, tApply, tBootstrap}},
	} {
		t.Run(tc.stop, func(t *testing.T) {
			cfg := stackConfig(t, "dev", nil) // no app secrets: a stopped apps layer needs none
			cfg["milner:stopAfter"] = tc.stop
			rec := runStack(t, "dev", cfg)
			for _, r := range rec.Registrations() {
				for _, f := range tc.forbidden {
					assert.False(t, strings.HasPrefix(r.Type, f), "stopAfter %s registered %s %s", tc.stop, r.Type, r.Name)
				}
			}
			for _, w := range tc.want {
				assert.NotEmpty(t, rec.ByType(w), w)
			}
			if tc.stop == "substrate" {
				assert.Empty(t, rec.Invokes(), "no Talos invoke before the Talos layer")
			}
		})
	}
}

func TestMissingSecretIsAClearErrorAndRegistersNothing(t *testing.T) {
	rec, err := offline.Run(stacks.Program, "dev", stackConfig(t, "dev", nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:woodpeckerAgentSecret")
	assert.Contains(t, err.Error(), "pulumi config set --secret milner:woodpeckerAgentSecret")
	assert.Empty(t, rec.Registrations())
}

func TestAdoptedDomainIsImported(t *testing.T) {
	const uuid = "0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69"
	cfg := patchKey(t, stackConfig(t, "dev", devSecrets), "milner:nodes", func(v any) {
		v.([]any)[1].(map[string]any)["adoptId"] = uuid
	})
	rec := runStack(t, "dev", cfg)
	for _, d := range rec.ByType(tDomain) {
		if d.Name == "milner-dev-cp-2" {
			assert.Equal(t, uuid, d.Options.ImportID)
			assert.ElementsMatch(t, slices.Concat(substrate.LibvirtDomainNeverReadBack, substrate.LibvirtDomainKeptAsCreated, substrate.LibvirtDomainIgnoredOnAdopt), d.Options.IgnoreChanges)
			continue
		}
		assert.Empty(t, d.Options.ImportID, d.Name)
		assert.ElementsMatch(t, slices.Concat(substrate.LibvirtDomainNeverReadBack, substrate.LibvirtDomainKeptAsCreated), d.Options.IgnoreChanges, d.Name)
	}
}

func TestDevNetwork(t *testing.T) {
	cfg := stackConfig(t, "dev", devSecrets)
	rec := runStack(t, "dev", cfg)
	nets := rec.ByType(tNetwork)
	require.Len(t, nets, 1)
	n := nets[0].Inputs
	assert.Equal(t, "nat", n["mode"].StringValue())
	assert.Equal(t, substrate.BridgeName("milner-dev"), n["bridge"].StringValue())
	assert.Len(t, n["bridge"].StringValue(), 14, "a Linux interface name has at most 15 characters")
	assert.False(t, n["dns"].ObjectValue()["localOnly"].BoolValue(), "a NAT network forwards DNS upstream")
	xslt := n["xml"].ObjectValue()["xslt"].StringValue()
	assert.Contains(t, xslt, `<xsl:attribute name="start">10.73.0.100</xsl:attribute>`)
	assert.Contains(t, xslt, `<xsl:attribute name="end">10.73.0.199</xsl:attribute>`)

	// An isolated network keeps DNS to itself. (A libvirt stack without a
	// dhcpRange is refused by config: libvirt would lease the nodes' and the
	// VIP's addresses, stacks/config TestNetworkShape.)
	isolated := patchKey(t, cfg, "milner:network", func(v any) {
		v.(map[string]any)["mode"] = "isolated"
	})
	n = runStack(t, "dev", isolated).ByType(tNetwork)[0].Inputs
	assert.Equal(t, "none", n["mode"].StringValue(), "isolated is libvirt's mode none: no forward")
	assert.True(t, n["dns"].ObjectValue()["localOnly"].BoolValue())
}

// TestDevTalosApplyModeDecided: under milner (RunOptions.ApplyMode) each
// node's apply sends the mode decided for it, from the very config the
// provider applies (the rendered config and the node's extra patches) and
// the cluster's client identity; the mode is not a secret.
func TestDevTalosApplyModeDecided(t *testing.T) {
	cfg := stackConfig(t, "dev", devSecrets)
	want := map[string]string{"cp-1-apply": applymode.Auto, "cp-2-apply": applymode.Staged, "cp-3-apply": applymode.NoReboot}
	var mu sync.Mutex
	asked := map[string]applymode.Request{}
	decide := func(r applymode.Request) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[r.Node] = r
		return want[r.Node+"-apply"], nil
	}
	rec, err := offline.Run(stacks.NewProgram(&stacks.RunOptions{ApplyMode: decide}), "dev", cfg, slices.Sorted(maps.Keys(devSecrets))...)
	require.NoError(t, err)
	applies := rec.ByType(tApply)
	require.Len(t, applies, 3)
	for _, a := range applies {
		mode := a.Inputs["applyMode"]
		assert.False(t, mode.ContainsSecrets(), a.Name)
		if mode.IsSecret() {
			mode = mode.SecretValue().Element
		}
		assert.Equal(t, want[a.Name], mode.StringValue(), a.Name)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, asked, 3)
	for node, r := range asked {
		assert.NotEmpty(t, r.Config, node)
		assert.NotEmpty(t, r.CA, node)
		assert.True(t, r.Address.IsValid(), node)
	}
}

// TestDevTalosApplyModeRefusalFailsTheRun: a node that refuses its
// config's dry run (internal/applymode: the node's own answer) fails the
// run with that error, naming the node, rather than planning a mode.
func TestDevTalosApplyModeRefusalFailsTheRun(t *testing.T) {
	cfg := stackConfig(t, "dev", devSecrets)
	refusal := "rpc error: code = InvalidArgument desc = 1 error occurred:\n\t* invalid machine type"
	decide := func(r applymode.Request) (string, error) {
		if r.Node == "cp-2" {
			return "", errors.New(refusal)
		}
		return applymode.NoReboot, nil
	}
	_, err := offline.Run(stacks.NewProgram(&stacks.RunOptions{ApplyMode: decide}), "dev", cfg, slices.Sorted(maps.Keys(devSecrets))...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `talosnode "cp-2": apply mode: `+refusal)
}
