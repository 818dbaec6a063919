package upgrade

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/siderolabs/go-kubernetes/kubernetes/upgrade"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	stackconfig "github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/offlinetest"
)

// The one-graph proof, under Pulumi mocks (no Talos provider plugin can be
// built here, and no Talos node boots): the real program runs on the dev
// stack before and after a version bump; each node's config is rendered
// from the program's inputs the way the provider renders it; the upgrade
// is applied to the old config the way Talos and upgrade-k8s change it;
// and what the bumped program would apply is compared with what the node
// then holds.

const (
	tGetConfig = "talos:machine/getConfiguration:getConfiguration"
	tApply     = "talos:machine/configurationApply:ConfigurationApply"
)

// oneGraphStack is the dev stack with a worker added (upgrade-k8s treats
// workers differently), at the given versions and installer.
func oneGraphStack(t *testing.T, talos, kubernetes, installer string) map[string]string {
	t.Helper()
	cfg, err := offlinetest.ReadStackConfig("../../Pulumi.dev.yaml")
	require.NoError(t, err)
	var cluster map[string]any
	require.NoError(t, json.Unmarshal([]byte(cfg["milner:cluster"]), &cluster))
	cluster["talosVersion"], cluster["kubernetesVersion"] = talos, kubernetes
	if installer != "" {
		cluster["installImage"] = installer
	}
	var nodes []map[string]any
	require.NoError(t, json.Unmarshal([]byte(cfg["milner:nodes"]), &nodes))
	w := maps.Clone(nodes[0])
	w["name"], w["role"], w["address"], w["mac"] = "w-1", "worker", "10.73.0.14", "52:54:00:73:00:14"
	nodes = append(nodes, w)
	for key, v := range map[string]any{"milner:cluster": cluster, "milner:nodes": nodes} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		cfg[key] = string(b)
	}
	cfg["milner:stopAfter"] = string(stackconfig.LayerTalos)
	// The apps are not deployed (stopAfter), and the dev stack's three
	// Vault peers do not fit the one worker that now takes the workloads.
	delete(cfg, "milner:apps")
	return cfg
}

// nodeInputs are one node's Talos inputs in a run: the generator invoke's
// arguments and the ConfigurationApply's inputs.
type nodeInputs struct {
	Generator resource.PropertyMap
	Apply     resource.PropertyMap
}

// runTalos runs the program and returns every node's Talos inputs.
func runTalos(t *testing.T, cfg map[string]string) map[string]nodeInputs {
	t.Helper()
	rec, err := offline.Run(stacks.Program, "dev", cfg)
	require.NoError(t, err)
	out := map[string]nodeInputs{}
	for _, a := range rec.ByType(tApply) {
		node := strings.TrimSuffix(a.Name, "-apply")
		for _, inv := range offlinetest.InvokesOf(rec, tGetConfig) {
			if strings.Contains(inv.Args["configPatches"].ArrayValue()[0].StringValue(), `"hostname":"`+node+`"`) {
				out[node] = nodeInputs{Generator: inv.Args, Apply: a.Inputs}
			}
		}
	}
	require.Len(t, out, 4)
	return out
}

// render is the machine config a node receives from these inputs, as the
// provider makes it: its machine configuration data source runs
// machinery's generator with the version contract, the secrets bundle and
// the Kubernetes version, then applies the config patches
// (terraform-provider-talos pkg/talos/talos_machine_configuration_data_source.go
// and util.go, machineConfigGenerateOptions.generate); the apply resource
// then applies its own config_patches on top.
func render(t *testing.T, in nodeInputs, bundle *secrets.Bundle) *v1alpha1.Config {
	t.Helper()
	g := in.Generator
	contract, err := config.ParseContractFromVersion(g["talosVersion"].StringValue())
	require.NoError(t, err)
	input, err := generate.NewInput(g["clusterName"].StringValue(), g["clusterEndpoint"].StringValue(),
		strings.TrimPrefix(g["kubernetesVersion"].StringValue(), "v"),
		generate.WithVersionContract(contract),
		generate.WithSecretsBundle(bundle),
		generate.WithClusterDiscovery(true),
		generate.WithDNSDomain(constants.DefaultDNSDomain),
		generate.WithInstallDisk("/dev/sda"),
	)
	require.NoError(t, err)
	typ, err := machine.ParseType(g["machineType"].StringValue())
	require.NoError(t, err)
	cfg, err := input.Config(typ)
	require.NoError(t, err)
	for _, list := range []resource.PropertyValue{g["configPatches"], in.Apply["configPatches"]} {
		var raw []string
		for _, p := range list.ArrayValue() {
			raw = append(raw, p.StringValue())
		}
		patches, err := configpatcher.LoadPatches(raw)
		require.NoError(t, err)
		out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), patches)
		require.NoError(t, err)
		cfg, err = out.Config()
		require.NoError(t, err)
	}
	return cfg.RawV1Alpha1().DeepCopy()
}

// upgraded is the config a node holds after `milner upgrade` moved it from
// cfg to the declared Kubernetes version. The Talos Upgrade API installs
// the image it is passed and writes no machine config (talos v1.11.5
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
// Upgrade). upgrade-k8s then patches, with the options UpgradeKubernetes
// passes, on control planes the kube-apiserver, controller-manager and
// scheduler images (pkg/cluster/kubernetes/talos_managed.go,
// staticPodImage: "<image>:v<to>") and the kube-proxy image
// (patchKubeProxy), and on every node the kubelet image
// (kubelet.go, upgradeKubeletPatcher: "<image>:v<to><old suffix>").
func upgraded(t *testing.T, cfg *v1alpha1.Config, from, to string) *v1alpha1.Config {
	t.Helper()
	path, err := upgrade.NewPath(strings.TrimPrefix(from, "v"), strings.TrimPrefix(to, "v"))
	require.NoError(t, err)
	o := upgradeOptions(path, KubernetesStep{}, nil)
	out := cfg.DeepCopy()
	v := path.ToVersion()
	if out.MachineConfig.MachineType == machine.TypeControlPlane.String() {
		out.ClusterConfig.APIServerConfig.ContainerImage = fmt.Sprintf("%s:v%s", o.APIServerImage, v)
		out.ClusterConfig.ControllerManagerConfig.ContainerImage = fmt.Sprintf("%s:v%s", o.ControllerManagerImage, v)
		out.ClusterConfig.SchedulerConfig.ContainerImage = fmt.Sprintf("%s:v%s", o.SchedulerImage, v)
		out.ClusterConfig.ProxyConfig.ContainerImage = fmt.Sprintf("%s:v%s", o.ProxyImage, v)
	}
	out.MachineConfig.MachineKubelet.KubeletImage = fmt.Sprintf("%s:v%s", o.KubeletImage, v)
	return out
}

// rawConfig is a stack's raw config as stackconfig.Load reads it.
type rawConfig map[string]string

func (r rawConfig) GetConfig(key string) (string, bool) { v, ok := r[key]; return v, ok }
func (r rawConfig) IsConfigSecret(string) bool          { return false }

// yamlOf encodes a config as Talos compares it.
func yamlOf(t *testing.T, cfg *v1alpha1.Config) string {
	t.Helper()
	b, err := encoder.NewEncoder(cfg, encoder.WithComments(encoder.CommentsDisabled)).Encode()
	require.NoError(t, err)
	return string(b)
}

// TestAfterUpgradeUpPlansNoChange: "after an upgrade, up plans no change",
// under Pulumi mocks. The real program runs on the dev stack (plus a
// worker) before and after a version bump; each node's config is rendered
// from the program's inputs as the provider renders it (machinery's
// generator with the contract, then the patches); the upgrade is applied to
// the old config as Talos' Upgrade API (no config change) and upgrade-k8s
// (the images, with the options Milner passes it) change it; the result
// equals the bumped program's config but for the installer reference, and a
// second run of the bumped program has the same Talos inputs, so once
// recorded there is no diff. The whole verb on the real engine:
// tests/integration TestTalosLayerOnRealPlugin (a Talos bump) and
// TestTalosControlPlanesOnRealPlugin (a Kubernetes bump).
func TestAfterUpgradeUpPlansNoChange(t *testing.T) {
	const (
		fromTalos, fromK8s = "v1.9.5", "v1.32.3"
		toTalos, toK8s     = "v1.10.6", "v1.33.5"
	)
	// A custom installer (an image factory schematic): the upgrade must
	// install the very image the config declares.
	const installer = "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:" + toTalos
	contract, err := config.ParseContractFromVersion("v1.9")
	require.NoError(t, err)
	// One secrets bundle for the cluster's life (the protected Secrets).
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	require.NoError(t, err)

	before := runTalos(t, oneGraphStack(t, fromTalos, fromK8s, ""))
	bumped := oneGraphStack(t, toTalos, toK8s, installer)
	after := runTalos(t, bumped)

	// What `milner upgrade` passes the Upgrade API: the declared installer.
	typed, err := stackconfig.Load(rawConfig(bumped))
	require.NoError(t, err)
	d := FromConfig(typed)
	require.Equal(t, installer, d.InstallImage)

	for _, node := range slices.Sorted(maps.Keys(after)) {
		old := render(t, before[node], bundle)
		held := upgraded(t, old, fromK8s, toK8s)
		next := render(t, after[node], bundle)
		require.NotEqual(t, yamlOf(t, old), yamlOf(t, next), "%s: the bump changes the config", node)
		// The one difference: the installer reference. Talos applies a
		// .machine.install change immediately, without a reboot
		// (CanApplyImmediate), and it changes nothing on a running node.
		assert.Equal(t, d.InstallImage, next.MachineConfig.MachineInstall.InstallImage, node)
		held.MachineConfig.MachineInstall.InstallImage = next.MachineConfig.MachineInstall.InstallImage
		assert.Equal(t, yamlOf(t, held), yamlOf(t, next),
			"%s: the bumped stack's config must be what the upgrade left on the node", node)
	}

	// Once recorded, the next up's inputs are the recorded ones: no diff.
	again := runTalos(t, bumped)
	for node, in := range after {
		assert.True(t, in.Generator.DeepEquals(again[node].Generator), "%s generator inputs", node)
		assert.True(t, in.Apply.DeepEquals(again[node].Apply), "%s apply inputs", node)
	}
}
