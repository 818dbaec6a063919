package pipeline

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/milner/milner/internal/clientfiles"
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

// TestAdminKubeconfigKeepsTheCurrentContext: `milner kubeconfig --admin`
// merges the break-glass context and keeps the user's current one,
// naming the way to use the new one; a merge that does make the admin
// certificate's context current (a stack without OIDC, or a file with no
// current context) says so on stderr, with the way back; a talosconfig's
// change is said on stdout.
func TestAdminKubeconfigKeepsTheCurrentContext(t *testing.T) {
	const other = "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster: {server: https://lab:6443}\ncontexts:\n- name: lab\n  context: {cluster: lab, user: lab}\nusers:\n- name: lab\n  user: {token: t}\ncurrent-context: lab\n"
	file := func(t *testing.T, text string) string {
		path := filepath.Join(t.TempDir(), "config")
		if text != "" {
			require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
		}
		return path
	}
	current := func(t *testing.T, path string) string {
		c, err := clientcmd.LoadFromFile(path)
		require.NoError(t, err)
		return c.CurrentContext
	}

	var stdout, stderr bytes.Buffer
	path := file(t, other)
	require.NoError(t, mergeClientConfig(clientfiles.Kube, "dev", adminKubeconfig, path, true, true, &stdout, &stderr))
	assert.Equal(t, "lab", current(t, path), "--admin keeps the current context")
	assert.Contains(t, stdout.String(), `the current context stays "lab"; use the stack's with --context admin@milner-dev`)
	assert.Empty(t, stderr.String())

	stdout.Reset()
	path = file(t, other)
	require.NoError(t, mergeClientConfig(clientfiles.Kube, "dev", adminKubeconfig, path, false, true, &stdout, &stderr))
	assert.Equal(t, "admin@milner-dev", current(t, path))
	assert.Contains(t, stderr.String(), `WARNING: the current context is now "admin@milner-dev" (was "lab"): the cluster's admin certificate, system:masters`)
	assert.Contains(t, stderr.String(), "kubectl config use-context lab")

	stderr.Reset()
	path = file(t, "")
	require.NoError(t, mergeClientConfig(clientfiles.Kube, "dev", adminKubeconfig, path, true, true, &stdout, &stderr))
	assert.Equal(t, "admin@milner-dev", current(t, path), "a file with no current context gets the merged one")
	assert.Contains(t, stderr.String(), "(the file had none)")

	stdout.Reset()
	stderr.Reset()
	path = file(t, "context: other\ncontexts:\n  other:\n    endpoints: [10.0.0.1]\n")
	require.NoError(t, mergeClientConfig(clientfiles.Talos, "dev", "context: milner-dev\ncontexts:\n  milner-dev:\n    endpoints: [10.73.0.11]\n", path, false, false, &stdout, &stderr))
	assert.Contains(t, stdout.String(), `the current context is now "milner-dev" (was "other")`)
	assert.Empty(t, stderr.String())
}
