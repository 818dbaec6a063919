package tests

import (
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks"
)

// dnsHostsOf returns a libvirt network registration's dns.hosts as
// hostname → ip.
func dnsHostsOf(t testing.TB, in resource.PropertyMap) map[string]string {
	t.Helper()
	out := map[string]string{}
	hosts, ok := in["dns"].ObjectValue()["hosts"]
	if !ok {
		return out
	}
	for _, h := range hosts.ArrayValue() {
		o := h.ObjectValue()
		out[o["hostname"].StringValue()] = o["ip"].StringValue()
	}
	return out
}

// TestDevNamesResolve: the dev network's DNS answers Vault's configured
// name at its configured address, and Vault's UI Service is the
// LoadBalancer MetalLB gives exactly that address (its annotation), so the
// name and the Service agree before any Service exists.
func TestDevNamesResolve(t *testing.T) {
	rec := runStack(t, "dev", stackConfig(t, "dev", devSecrets))
	nets := rec.ByType(tNetwork)
	require.Len(t, nets, 1)
	assert.Equal(t, map[string]string{"vault.milner.internal": "10.73.0.241"}, dnsHostsOf(t, nets[0].Inputs))
	assert.NotContains(t, nets[0].Options.IgnoreChanges, "dns", "the names must reach the network")

	v := values(t, reg(t, rec, tRelease, "vault-release"))
	assert.Equal(t, true, at(t, v, "ui.enabled"))
	assert.Equal(t, "LoadBalancer", at(t, v, "ui.serviceType"))
	assert.Equal(t, map[string]any{stacks.LBAddressAnnotation: "10.73.0.241"}, at(t, v, "ui.annotations"))
	_, onServer := v["server"].(map[string]any)["service"]
	assert.False(t, onServer, "server.service.type would make -active and -standby LoadBalancers asking for the same address")
}

// TestProdNamesOnTheSite: prod has no libvirt network; its Vault Service
// asks for prod's address, and the records are the site's (milner status).
func TestProdNamesOnTheSite(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	assert.Empty(t, rec.ByType(tNetwork))
	v := values(t, reg(t, rec, tRelease, "vault-release"))
	assert.Equal(t, map[string]any{stacks.LBAddressAnnotation: "192.168.1.241"}, at(t, v, "ui.annotations"))
}

// TestAddingNamesUpdatesTheNetworkInPlace: the existing dev stack (no
// expose) and the new one differ on the network only in dns.hosts, the one
// dns input terraform-provider-libvirt v0.8.3 updates in place (not
// ForceNew: resource_libvirt_network.go, network_dns.go updateDNSHosts);
// every other substrate input is unchanged, so no protected object is
// replaced.
func TestAddingNamesUpdatesTheNetworkInPlace(t *testing.T) {
	cfg := stackConfig(t, "dev", devSecrets)
	before := patchKey(t, cfg, "milner:apps", func(v any) {
		for _, a := range v.([]any) {
			delete(a.(map[string]any), "expose")
		}
	})
	old, cur := substrateInputs(runStack(t, "dev", before)), substrateInputs(runStack(t, "dev", cfg))
	require.Equal(t, len(old), len(cur))
	for name, in := range cur {
		o := old[name]
		require.NotNil(t, o, name)
		if name != tNetwork+"::milner-dev-net" {
			assert.True(t, in.DeepEquals(o), "%s changed", name)
			continue
		}
		assert.Empty(t, dnsHostsOf(t, o), "the existing network has no names")
		for k := range in {
			if k != "dns" {
				assert.True(t, in[k].DeepEquals(o[k]), "network input %s changed", k)
			}
		}
		od, nd := o["dns"].ObjectValue(), in["dns"].ObjectValue()
		for k := range nd {
			if k != "hosts" {
				assert.True(t, nd[k].DeepEquals(od[k]), "network dns.%s changed", k)
			}
		}
	}
}
