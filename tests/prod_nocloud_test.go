package tests

// The prod stack's first machine config goes on each node's nocloud drive
// (stacks/firstconfig.go): a snippet per node, its id on the node VM, its
// content exactly the config the node's TalosNode applies. Helpers here are
// prefixed "pnc".

import (
	"maps"
	"slices"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/conformance"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/internal/talosconfig"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/offlinetest"
)

// pncTRender is the machine-configuration data source's token.
const pncTRender = "talos:machine/getConfiguration:getConfiguration"

// pncPlain returns a string property's value, secret or not, and whether it was secret.
func pncPlain(t testing.TB, v resource.PropertyValue) (string, bool) {
	t.Helper()
	if v.IsSecret() {
		return v.SecretValue().Element.StringValue(), true
	}
	require.True(t, v.IsString(), "not a string: %v", v)
	return v.StringValue(), false
}

// pncRenderOf returns the one render invoke whose result is config.
func pncRenderOf(t testing.TB, rec *offline.Recorder, config string) offline.Invoke {
	t.Helper()
	var found []offline.Invoke
	for _, inv := range offlinetest.InvokesOf(rec, pncTRender) {
		if got, _ := pncPlain(t, inv.Result["machineConfiguration"]); got == config {
			found = append(found, inv)
		}
	}
	require.Len(t, found, 1, "renders giving %q", config)
	return found[0]
}

// pncStrings returns a string array property's values.
func pncStrings(v resource.PropertyValue) []string {
	var out []string
	for _, e := range v.ArrayValue() {
		out = append(out, e.StringValue())
	}
	return out
}

// TestProdFirstConfigIsWhatTheTalosLayerApplies: every node VM's nocloud
// drive points at its own snippet, on its host's snippets datastore, and the
// snippet's content is exactly the config its TalosNode applies: rendered
// from the same generator inputs with the apply's input patches followed by
// the apply's own patches, in that order.
func TestProdFirstConfigIsWhatTheTalosLayerApplies(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	require.Len(t, rec.ByType(prodTSnippet), len(prodNodes))
	for _, n := range prodNodes {
		name := "milner-prod-" + n.name + "-userdata"
		snippet, ok := rec.ByName(prodTSnippet, name)
		require.True(t, ok, "no snippet %s", name)
		assert.Equal(t, n.host, snippet.Inputs["nodeName"].StringValue(), "the snippet is on the node's host")
		assert.Equal(t, "local", snippet.Inputs["datastoreId"].StringValue())
		assert.Equal(t, "snippets", snippet.Inputs["contentType"].StringValue())
		raw := snippet.Inputs["sourceRaw"].ObjectValue()
		assert.Equal(t, "milner-prod-"+n.name+"-talos.yaml", raw["fileName"].StringValue())
		first, secret := pncPlain(t, raw["data"])
		assert.True(t, secret, "the first config holds the cluster's keys: secret")

		vm := prodVM(t, rec, "milner-prod-"+n.name)
		assert.Equal(t, name+"-id", vm.Inputs["initialization"].ObjectValue()["userDataFileId"].StringValue(),
			"the node VM's nocloud drive carries its snippet")

		apply, ok := rec.ByName(tApply, n.name+"-apply")
		require.True(t, ok)
		input, _ := pncPlain(t, apply.Inputs["machineConfigurationInput"])
		applyPatches := pncStrings(apply.Inputs["configPatches"])
		require.NotEmpty(t, applyPatches, "prod's nodes carry other layers' patches: the comparison covers them")

		base, boot := pncRenderOf(t, rec, input), pncRenderOf(t, rec, first)
		assert.Equal(t, append(pncStrings(base.Args["configPatches"]), applyPatches...), pncStrings(boot.Args["configPatches"]),
			"%s boots with its own patch and then the apply's patches", n.name)
		others := func(args resource.PropertyMap) resource.PropertyMap {
			out := args.Copy()
			delete(out, "configPatches")
			return out
		}
		assert.True(t, others(base.Args).DeepEquals(others(boot.Args)), "%s: same generator inputs", n.name)
	}
}

// pncInput is the generator input of one render invoke, for Talos' machinery.
func pncInput(inv offline.Invoke) talosconfig.Input {
	return talosconfig.Input{
		ClusterName:       inv.Args["clusterName"].StringValue(),
		Endpoint:          inv.Args["clusterEndpoint"].StringValue(),
		KubernetesVersion: inv.Args["kubernetesVersion"].StringValue(),
		Contract:          inv.Args["talosVersion"].StringValue(),
		MachineType:       inv.Args["machineType"].StringValue(),
		Patches:           pncStrings(inv.Args["configPatches"]),
		Platform:          talosconfig.Nocloud,
	}
}

// TestProdFirstConfigEqualsTheAppliedConfigInTalosMachinery checks, with
// Talos' own generator and patcher (machinery v1.11.5, one secrets bundle),
// what firstBootConfigs relies on: rendering a node with [own, extra...]
// gives the config the apply resource computes by patching the rendered
// [own] config (as bytes, as the provider holds it) with extra. So the
// node's first authenticated apply brings no change.
func TestProdFirstConfigEqualsTheAppliedConfigInTalosMachinery(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	secrets := newTalosSecrets(t, "v1.9")
	for _, n := range prodNodes {
		snippet, ok := rec.ByName(prodTSnippet, "milner-prod-"+n.name+"-userdata")
		require.True(t, ok)
		first, _ := pncPlain(t, snippet.Inputs["sourceRaw"].ObjectValue()["data"])
		apply, ok := rec.ByName(tApply, n.name+"-apply")
		require.True(t, ok)
		input, _ := pncPlain(t, apply.Inputs["machineConfigurationInput"])

		// The first boot: the generator with every patch.
		boot, _, err := renderTalos(secrets, pncInput(pncRenderOf(t, rec, first)))
		require.NoError(t, err, n.name)
		bootBytes, err := boot.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
		require.NoError(t, err)

		// The apply: the rendered config's bytes, patched with the apply's patches.
		base, _, err := renderTalos(secrets, pncInput(pncRenderOf(t, rec, input)))
		require.NoError(t, err, n.name)
		baseBytes, err := base.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
		require.NoError(t, err)
		patches, err := configpatcher.LoadPatches(pncStrings(apply.Inputs["configPatches"]))
		require.NoError(t, err)
		out, err := configpatcher.Apply(configpatcher.WithBytes(baseBytes), patches)
		require.NoError(t, err)
		appliedBytes, err := out.Bytes()
		require.NoError(t, err)

		assert.Equal(t, string(appliedBytes), string(bootBytes), "%s: the first-boot config is the applied config", n.name)
		assert.NotEqual(t, string(baseBytes), string(bootBytes), "%s: the other layers' patches are in it (sanity)", n.name)
	}
}

// TestProdConformanceSeesEachNodeConfigOnce: `milner check` validates each
// prod node's config from its patches; the first-boot render, which already
// carries the apply's patches, must not get them twice.
func TestProdConformanceSeesEachNodeConfigOnce(t *testing.T) {
	raw := stackConfig(t, "prod", prodSecrets)
	s, err := stackfile.New("prod", "", raw, slices.Sorted(maps.Keys(prodSecrets)))
	require.NoError(t, err)
	ev, err := conformance.Collect(s)
	require.NoError(t, err)
	inputs, err := conformance.NodeInputs(ev)
	require.NoError(t, err)
	require.Len(t, inputs, len(prodNodes))
	rec := runStack(t, "prod", raw)
	for _, n := range prodNodes {
		apply, ok := rec.ByName(tApply, n.name+"-apply")
		require.True(t, ok)
		extra := pncStrings(apply.Inputs["configPatches"])
		require.NotEmpty(t, extra)
		got := inputs[n.name].Patches
		require.Len(t, got, 1+len(extra), "%s: its own patch, then the apply's, once", n.name)
		assert.Equal(t, extra, got[1:], n.name)
	}
}

// pncVMs returns every Proxmox VM's inputs by name.
func pncVMs(rec *offline.Recorder) map[string]resource.PropertyMap {
	out := map[string]resource.PropertyMap{}
	for _, r := range rec.ByType(prodTVM) {
		out[r.Name] = r.Inputs
	}
	return out
}

// TestProdChangedPatchReplacesNoVM: a change to a node's own patch and to
// another layer's patch reaches the snippet's content, which is ignored
// after creation; no VM input changes, the snippet keeps its file name (its
// id), and the node VM ignores the id anyway, which bpg would otherwise
// replace it for (ForceNew).
func TestProdChangedPatchReplacesNoVM(t *testing.T) {
	cfg := stackConfig(t, "prod", prodSecrets)
	before := runStack(t, "prod", cfg)
	changed := patchKey(t, cfg, "milner:cluster", func(v any) {
		v.(map[string]any)["installImage"] = "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:" + stackCluster(t, "prod").TalosVersion
	})
	changed = patchKey(t, changed, "milner:storage", func(v any) { v.(map[string]any)["path"] = "/var/mnt/data/elsewhere" })
	after := runStack(t, "prod", changed)

	b, a := pncVMs(before), pncVMs(after)
	require.Len(t, a, 2*len(prodNodes))
	for _, name := range slices.Sorted(maps.Keys(b)) {
		assert.True(t, b[name].DeepEquals(a[name]), "VM %s: inputs changed by a machine-config patch", name)
	}
	for _, n := range prodNodes {
		name := "milner-prod-" + n.name + "-userdata"
		sb, _ := before.ByName(prodTSnippet, name)
		sa, ok := after.ByName(prodTSnippet, name)
		require.True(t, ok)
		db, _ := pncPlain(t, sb.Inputs["sourceRaw"].ObjectValue()["data"])
		da, _ := pncPlain(t, sa.Inputs["sourceRaw"].ObjectValue()["data"])
		assert.NotEqual(t, db, da, "the change reaches the first config (sanity)")
		assert.Equal(t, []string{"sourceRaw", "fileMode"}, sa.Options.IgnoreChanges, "the snippet only seeds a new node; its mode is set at creation")
		assert.Equal(t, "0600", sa.Inputs["fileMode"].StringValue(), "the snippet holds the CA keys: owner-only")
		assert.True(t, sa.Options.RetainOnDelete, "a VM may still name the file: never deleted by a plan")
		for _, k := range []resource.PropertyKey{"nodeName", "datastoreId", "contentType"} {
			assert.Equal(t, sb.Inputs[k], sa.Inputs[k], "%s: %s", name, k)
		}
		assert.Equal(t, sb.Inputs["sourceRaw"].ObjectValue()["fileName"], sa.Inputs["sourceRaw"].ObjectValue()["fileName"])
		vm := prodVM(t, after, "milner-prod-"+n.name)
		assert.Contains(t, vm.Options.IgnoreChanges, "initialization.userDataFileId")
	}
}

// TestProdProviderSSH: the provider gets the ssh block the snippets need:
// the agent as committed, or the secret key when the agent is off.
func TestProdProviderSSH(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	provs := rec.ByType(prodTProvider)
	require.Len(t, provs, 1)
	ssh := provs[0].Inputs["ssh"]
	require.True(t, ssh.IsObject(), "provider ssh: %v", ssh)
	assert.Equal(t, "root", ssh.ObjectValue()["username"].StringValue())
	assert.True(t, ssh.ObjectValue()["agent"].BoolValue())

	key := "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
	cfg := pxcEditProxmox(t, stackConfig(t, "prod", prodSecrets), func(px map[string]any) {
		px["ssh"].(map[string]any)["agent"] = false
	})
	cfg["milner:"+config.ProxmoxSSHKeyKey] = key
	keyed, err := offline.Run(stacks.Program, "prod", cfg, append(slices.Collect(maps.Keys(prodSecrets)), "milner:"+config.ProxmoxSSHKeyKey)...)
	require.NoError(t, err)
	p := keyed.ByType(prodTProvider)[0].Inputs["ssh"]
	// The provider's inputs hold the key as a secret (or the whole block
	// as one, as the engine marks a secret nested in an object).
	var obj resource.PropertyMap
	if p.IsSecret() {
		obj = p.SecretValue().Element.ObjectValue()
	} else {
		obj = p.ObjectValue()
	}
	got, secret := pncPlain(t, obj["privateKey"])
	assert.Equal(t, key, got)
	assert.True(t, secret || p.IsSecret(), "the SSH key stays a secret")
	assert.False(t, obj["agent"].BoolValue())
}

// TestProdStoppedAtSubstrateHasNoFirstConfig: a stack that stops at the
// substrate declares no Talos resource, so no snippet either (its nodes
// boot to maintenance mode; README).
func TestProdStoppedAtSubstrateHasNoFirstConfig(t *testing.T) {
	cfg := stackConfig(t, "prod", prodSecrets)
	cfg["milner:stopAfter"] = "substrate"
	rec := runStack(t, "prod", cfg)
	assert.Empty(t, rec.ByType(prodTSnippet))
	assert.Empty(t, rec.ByType(tSecrets))
	assert.Empty(t, rec.Invokes())
	assert.NotEmpty(t, rec.ByType(prodTVM))
}
