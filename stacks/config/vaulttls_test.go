package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/tests/testpki"
)

// vaultStack is the base config with its app made Milner's Vault (release
// and namespace "vault", 3 peers) and the TLS keys set from b.
func vaultStack(t *testing.T, b testpki.Bundle, values obj) map[string]string {
	t.Helper()
	c := baseConfig()
	app := at(c, "apps", 0)
	app["chart"] = obj{"repo": "https://helm.releases.hashicorp.com", "name": "vault", "version": "0.29.1"}
	app["vault"] = obj{"replicas": 3}
	// Three peers need three nodes that take workloads (the chart places one per node).
	at(c, "cluster")["allowSchedulingOnControlPlanes"] = true
	delete(app, "secretValues")
	if values != nil {
		app["values"] = values
	}
	r := raw(t, c)
	r["milner:vaultTlsCert"], r["milner:vaultTlsKey"], r["milner:vaultTlsCa"] = b.Cert, b.Key, b.CA
	return r
}

// vaultNames are the names a release "vault" in namespace "vault" with 3
// peers must be served under.
var vaultNames = []string{"vault.vault.svc", "vault.vault.svc.cluster.local", "*.vault-internal", "*.vault-internal.vault.svc.cluster.local", "127.0.0.1"}

var tlsKeys = []string{"milner:vaultToken", "milner:vaultTlsCert", "milner:vaultTlsKey", "milner:vaultTlsCa"}

func TestVaultTLSAccepted(t *testing.T) {
	rec, err := offline.Run(stacks.Program, "t", vaultStack(t, testpki.Valid(vaultNames...), nil), tlsKeys...)
	require.NoError(t, err)
	assert.NotEmpty(t, rec.Registrations())
}

// TestVaultTLSRefusals: each bad TLS bundle is refused before anything
// registers, naming the secret key.
func TestVaultTLSRefusals(t *testing.T) {
	good := testpki.Valid(vaultNames...)
	other := testpki.Valid(vaultNames...)
	now := time.Now()
	for _, tc := range []struct {
		name string
		b    testpki.Bundle
		want string
	}{
		{"key of another cert", testpki.Bundle{Cert: good.Cert, Key: other.Key, CA: good.CA}, "milner:vaultTlsKey: is not the private key of milner:vaultTlsCert"},
		{"other CA", testpki.Bundle{Cert: good.Cert, Key: good.Key, CA: other.CA}, "milner:vaultTlsCa: does not sign milner:vaultTlsCert"},
		{"expired", testpki.Issue(vaultNames, now.Add(-48*time.Hour), now.Add(-time.Hour)), "milner:vaultTlsCert: expired on"},
		{"not yet valid", testpki.Issue(vaultNames, now.Add(time.Hour), now.Add(48*time.Hour)), "milner:vaultTlsCert: is not valid before"},
		{"no loopback", testpki.Valid(vaultNames[:4]...), "milner:vaultTlsCert: does not cover 127.0.0.1"},
		{"no raft peers", testpki.Valid("vault.vault.svc", "vault.vault.svc.cluster.local", "127.0.0.1"), "does not cover vault-0.vault-internal, vault-1.vault-internal, vault-2.vault-internal"},
		{"not PEM", testpki.Bundle{Cert: "test-cert", Key: good.Key, CA: good.CA}, "milner:vaultTlsCert: holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := offline.Run(stacks.Program, "t", vaultStack(t, tc.b, nil), tlsKeys...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, rec.Registrations(), "a bad config must register nothing")
		})
	}
}

// TestVaultHardeningCannotBeUndone: values outside the profile's own keys
// that would run Vault in dev mode, add a config or run no server.
func TestVaultHardeningCannotBeUndone(t *testing.T) {
	b := testpki.Valid(vaultNames...)
	for _, tc := range []struct {
		name   string
		values obj
		want   string
	}{
		{"extraArgs -dev", obj{"server": obj{"extraArgs": "-log-level=debug -dev"}}, "milner:apps[0].values.server.extraArgs: \"-dev\" is not one of the Vault server flags Milner allows there"},
		{"extraArgs --dev-tls", obj{"server": obj{"extraArgs": "--dev-tls"}}, "milner:apps[0].values.server.extraArgs:"},
		{"extraArgs -dev-root-token-id", obj{"server": obj{"extraArgs": "-dev-root-token-id=root"}}, "milner:apps[0].values.server.extraArgs:"},
		{"extraArgs -config", obj{"server": obj{"extraArgs": "-config=/vault/userconfig/plain.hcl"}}, "milner:apps[0].values.server.extraArgs:"},
		{"external vault", obj{"global": obj{"externalVaultAddr": "http://vault.example.org"}}, "milner:apps[0].values.global.externalVaultAddr: switches the chart to an external Vault"},
		{"injector external vault", obj{"injector": obj{"externalVaultAddr": "http://v"}}, "milner:apps[0].values.injector.externalVaultAddr:"},
		{"server disabled", obj{"server": obj{"enabled": false}}, "milner:apps[0].values.server.enabled: switches the chart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := offline.Run(stacks.Program, "t", vaultStack(t, b, tc.values), tlsKeys...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, rec.Registrations())
		})
	}
	// A harmless extra argument stays the stack's.
	_, err := offline.Run(stacks.Program, "t", vaultStack(t, b, obj{"server": obj{"extraArgs": "-log-level=debug"}}), tlsKeys...)
	require.NoError(t, err)
}

func TestVaultHardeningCannotHideInSecretValues(t *testing.T) {
	r := vaultStack(t, testpki.Valid(vaultNames...), nil)
	apps := strings.Replace(r["milner:apps"], `"vault":{`, `"secretValues":{"server.extraArgs":"vaultToken","server.dev.enabled":"vaultToken"},"vault":{`, 1)
	require.NotEqual(t, r["milner:apps"], apps)
	r["milner:apps"] = apps
	_, err := offline.Run(stacks.Program, "t", r, tlsKeys...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:apps[0].secretValues[server.extraArgs]: is set by Milner's hardened Vault")
	assert.Contains(t, err.Error(), "milner:apps[0].secretValues[server.dev.enabled]: is set by Milner's hardened Vault")
}
