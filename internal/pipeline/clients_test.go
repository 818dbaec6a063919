package pipeline

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
)

// adminKubeconfig is a stack's kubeconfig output: the admin certificate.
const adminKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: milner-dev
  cluster: {server: "https://10.73.0.240:6443", certificate-authority-data: Q0E=}
users:
- name: admin@milner-dev
  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}
contexts:
- name: admin@milner-dev
  context: {cluster: milner-dev, user: admin@milner-dev}
current-context: admin@milner-dev
`

// TestKubeconfigOIDCByDefaultAdminOnAsk: `milner kubeconfig` of a stack
// with milner:cluster.oidc writes the kubelogin context, never the admin
// key; --admin writes the admin certificate and says so on stderr, naming
// the runbook; a stack without OIDC gets the admin kubeconfig, silently.
func TestKubeconfigOIDCByDefaultAdminOnAsk(t *testing.T) {
	p := config.DefaultOIDCPrefix
	oidc := &config.OIDCConfig{IssuerURL: "https://sso.example.org/realms/site", ClientID: "kubernetes",
		UsernameClaim: "preferred_username", GroupsClaim: "groups", UsernamePrefix: &p, GroupsPrefix: &p}
	withOIDC := &Op{cfg: &config.Config{Cluster: config.ClusterConfig{OIDC: oidc}}}

	var stderr bytes.Buffer
	out, err := peopleOrAdmin(withOIDC, adminKubeconfig, false, false, &stderr)
	require.NoError(t, err)
	assert.Contains(t, out, "oidc-login")
	assert.Contains(t, out, "current-context: oidc@milner-dev")
	assert.NotContains(t, out, "S0VZ", "the admin key is not in the people's kubeconfig")
	assert.Empty(t, stderr.String())

	out, err = peopleOrAdmin(withOIDC, adminKubeconfig, true, false, &stderr)
	require.NoError(t, err)
	assert.Equal(t, adminKubeconfig, out)
	assert.Contains(t, stderr.String(), "break-glass admin certificate")
	assert.Contains(t, stderr.String(), "docs/runbooks/oidc.md")

	_, err = peopleOrAdmin(withOIDC, adminKubeconfig, false, true, &stderr)
	assert.ErrorContains(t, err, "give --admin too", "--renew issues the admin certificate only")

	stderr.Reset()
	out, err = peopleOrAdmin(&Op{cfg: &config.Config{}}, adminKubeconfig, false, false, &stderr)
	require.NoError(t, err)
	assert.Equal(t, adminKubeconfig, out)
	assert.Empty(t, stderr.String())
}
