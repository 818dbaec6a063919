package config_test

// The SSH key cases of the Proxmox bad-config catalog: they need the key
// marked secret, which the main table does not do.

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
)

// pxKey is a syntactically valid, unencrypted PEM private key block (its
// bytes are not a key: only the shape is checked before the provider).
const pxKey = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"

func TestProxmoxSSHKeyConfigs(t *testing.T) {
	const keyKey = "milner:" + config.ProxmoxSSHKeyKey
	noAgent := func(c map[string]any) { at(c, "substrate", "proxmox", "ssh")["agent"] = false }
	for _, tc := range []struct {
		name   string
		edit   func(c map[string]any)
		key    string
		secret bool
		want   string // the config path and the gist of the message; "" is valid
	}{
		{"agent", func(map[string]any) {}, "", true, ""},
		{"key", noAgent, pxKey, true, ""},
		{"key in plain text", noAgent, pxKey, false,
			"milner:proxmoxSshPrivateKey: is stored in plain text; run `pulumi config set --secret milner:proxmoxSshPrivateKey <value>`"},
		{"key not pem", noAgent, "hunter2", true, "milner:proxmoxSshPrivateKey: is not a PEM private key"},
		{"key is a certificate", noAgent, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", true,
			"milner:proxmoxSshPrivateKey: is not a PEM private key"},
		{"key encrypted", noAgent, "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n", true,
			"milner:proxmoxSshPrivateKey: is an encrypted private key"},
		{"agent and key", func(map[string]any) {}, pxKey, true,
			"milner:substrate.proxmox.ssh.agent: is true and the secret milner:proxmoxSshPrivateKey is set too"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pxBase()
			tc.edit(c)
			secrets := maps.Clone(pxSecrets)
			secretKeys := []string{"milner:proxmoxApiToken"}
			if tc.key != "" {
				secrets[keyKey] = tc.key
				if tc.secret {
					secretKeys = append(secretKeys, keyKey)
				}
			}
			_, err := configtest.Load(pxRaw(t, c, secrets), secretKeys...)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			var cfgErr *config.ConfigError
			require.True(t, errors.As(err, &cfgErr), "want a *config.ConfigError, got %v", err)
			assert.True(t, pxHasProblem(cfgErr.Problems, tc.want), "no problem starts with %q in:\n%s", tc.want, strings.Join(cfgErr.Problems, "\n"))
			assert.NotContains(t, err.Error(), "AAAA", "a key is never echoed")
			assert.NotContains(t, err.Error(), "hunter2", "a key is never echoed")
		})
	}
}

// TestProxmoxFirstConfigProblemsTogether: the missing snippets datastore and
// SSH access are reported at once, in a stable order.
func TestProxmoxFirstConfigProblemsTogether(t *testing.T) {
	c := pxBase()
	delete(at(c, "substrate", "proxmox"), "snippetsDatastore")
	delete(at(c, "substrate", "proxmox"), "ssh")
	_, err := config.Load(pxSource(pxRaw(t, c, pxSecrets)))
	var cfgErr *config.ConfigError
	require.True(t, errors.As(err, &cfgErr), "want a *config.ConfigError, got %v", err)
	var ours []string
	for _, p := range cfgErr.Problems {
		if strings.HasPrefix(p, "milner:substrate.proxmox.s") {
			ours = append(ours, strings.SplitN(p, ": ", 2)[0])
		}
	}
	assert.Equal(t, []string{"milner:substrate.proxmox.snippetsDatastore", "milner:substrate.proxmox.ssh"}, ours)
}
