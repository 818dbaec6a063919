package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
	"github.com/milner/milner/tests/testpki"
)

// exposedVault is vaultStack with the Vault app exposed at host and addr,
// and its certificate covering the host.
func exposedVault(t *testing.T, expose obj, edit func(c obj)) map[string]string {
	t.Helper()
	c := baseConfig()
	app := at(c, "apps", 0)
	app["chart"] = obj{"repo": "https://helm.releases.hashicorp.com", "name": "vault", "version": "0.29.1"}
	app["vault"] = obj{"replicas": 3}
	app["expose"] = expose
	at(c, "cluster")["allowSchedulingOnControlPlanes"] = true
	delete(app, "secretValues")
	if edit != nil {
		edit(c)
	}
	r := raw(t, c)
	b := testpki.Valid(append(vaultNames, "vault.milner.internal")...)
	r["milner:vaultTlsCert"], r["milner:vaultTlsKey"], r["milner:vaultTlsCa"] = b.Cert, b.Key, b.CA
	return r
}

// TestExposeAccepted: an exposed Vault's name and parsed address are the
// config's app names.
func TestExposeAccepted(t *testing.T) {
	cfg, err := configLoad(exposedVault(t, obj{"host": "vault.milner.internal", "address": "10.9.0.241"}, nil))
	require.NoError(t, err)
	require.Len(t, cfg.AppNames(), 1)
	n := cfg.AppNames()[0]
	assert.Equal(t, "vault", n.App)
	assert.Equal(t, "vault.milner.internal", n.Host)
	assert.Equal(t, "10.9.0.241", n.Address.String())
	assert.Contains(t, cfg.Apps[0].VaultTLSNames(), "vault.milner.internal", "the certificate must cover the exposed name")
}

// TestExposeRefusals: each rule of milner:apps[].expose refuses before
// anything is touched, naming its config path. Each row is one rule.
func TestExposeRefusals(t *testing.T) {
	second := func(expose obj) func(c obj) {
		return func(c obj) {
			c["apps"] = append(c["apps"].([]any), obj{
				"name": "wp", "chart": obj{"repo": "oci://ghcr.io/woodpecker-ci/helm", "name": "woodpecker", "version": "3.2.0"},
				"woodpecker": obj{"host": "https://ci.milner.internal", "forge": obj{"kind": "gitea", "url": "https://git.example.org"}},
				"expose":     expose,
			})
		}
	}
	ok := obj{"host": "vault.milner.internal", "address": "10.9.0.241"}
	for _, tc := range []struct {
		name   string
		expose obj
		edit   func(c obj)
		want   string
	}{
		{"address outside the pool", obj{"host": "vault.milner.internal", "address": "10.9.0.230"}, nil,
			"milner:apps[0].expose.address: 10.9.0.230 is outside the load-balancer pool 10.9.0.241-10.9.0.250"},
		{"address not an address", obj{"host": "vault.milner.internal", "address": "vault"}, nil,
			`milner:apps[0].expose.address: "vault" is not a unicast IP address`},
		{"host not a DNS name", obj{"host": "Vault_UI.local", "address": "10.9.0.241"}, nil,
			`milner:apps[0].expose.host: "Vault_UI.local" is not a lowercase DNS name`},
		{"host a URL", obj{"host": "https://vault.milner.internal", "address": "10.9.0.241"}, nil,
			`milner:apps[0].expose.host: "https://vault.milner.internal" is not a lowercase DNS name`},
		{"two apps on one address", ok, second(obj{"host": "ci.milner.internal", "address": "10.9.0.241"}),
			"milner:apps[1].expose.address: 10.9.0.241 is also the address of milner:apps[0].expose"},
		{"two apps on one host", ok, second(obj{"host": "vault.milner.internal", "address": "10.9.0.242"}),
			`milner:apps[1].expose.host: "vault.milner.internal" is also the host of milner:apps[0].expose`},
		{"not Vault", ok, second(obj{"host": "ci.milner.internal", "address": "10.9.0.242"}),
			"milner:apps[1].expose: is for a Vault app"},
		{"no load balancer", ok, func(c obj) { c["loadBalancer"] = obj{"enabled": false} },
			"milner:apps[0].expose: needs the load balancer"},
		{"values the expose owns", ok, func(c obj) { at(c, "apps", 0)["values"] = obj{"ui": obj{"serviceType": "NodePort"}} },
			"milner:apps[0].values.ui.serviceType: is set by milner:apps[0].expose"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configLoad(exposedVault(t, tc.expose, tc.edit))
			var cfgErr *config.ConfigError
			require.True(t, errors.As(err, &cfgErr), "want a *config.ConfigError, got %v", err)
			assert.True(t, pxHasProblem(cfgErr.Problems, tc.want), "no problem starts with %q in:\n%s", tc.want, strings.Join(cfgErr.Problems, "\n"))
		})
	}
}

// TestExposedHostNotInCertificate: Vault's certificate must cover the
// exposed name, or the workstation's client refuses it; refused before
// anything registers.
func TestExposedHostNotInCertificate(t *testing.T) {
	r := exposedVault(t, obj{"host": "vault.milner.internal", "address": "10.9.0.241"}, nil)
	b := testpki.Valid(vaultNames...)
	r["milner:vaultTlsCert"], r["milner:vaultTlsKey"], r["milner:vaultTlsCa"] = b.Cert, b.Key, b.CA
	rec, err := offline.Run(stacks.Program, "t", r, tlsKeys...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:vaultTlsCert: does not cover vault.milner.internal")
	assert.Empty(t, rec.Registrations(), "a bad config must register nothing")
}

// configLoad loads raw values with the Vault TLS keys secret.
func configLoad(r map[string]string) (*config.Config, error) {
	return configtest.Load(r, tlsKeys[1:]...)
}
