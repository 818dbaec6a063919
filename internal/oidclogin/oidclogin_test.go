package oidclogin

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/milner/milner/stacks/config"
)

const admin = `apiVersion: v1
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

func TestKubeconfigUsesKubeloginAndHoldsNoCredential(t *testing.T) {
	p := "oidc:"
	o := &config.OIDCConfig{IssuerURL: "https://sso.example.org/realms/site", ClientID: "kubernetes",
		UsernameClaim: "preferred_username", GroupsClaim: "groups", UsernamePrefix: &p, GroupsPrefix: &p}
	out, err := Kubeconfig(admin, o)
	require.NoError(t, err)
	cfg, err := clientcmd.Load([]byte(out))
	require.NoError(t, err)
	assert.Equal(t, "oidc@milner-dev", cfg.CurrentContext)
	assert.Equal(t, "https://10.73.0.240:6443", cfg.Clusters["milner-dev"].Server)
	require.Len(t, cfg.AuthInfos, 1)
	u := cfg.AuthInfos["oidc@milner-dev"]
	require.NotNil(t, u.Exec)
	assert.Equal(t, "kubectl", u.Exec.Command)
	assert.Equal(t, []string{"oidc-login", "get-token", "--oidc-issuer-url=https://sso.example.org/realms/site",
		"--oidc-client-id=kubernetes", "--oidc-extra-scope=profile", "--oidc-extra-scope=groups"}, u.Exec.Args)
	assert.Empty(t, u.Token)
	assert.Empty(t, u.ClientKeyData)
	assert.Empty(t, u.ClientCertificateData)
	assert.NotContains(t, out, "S0VZ", "the admin key is not in the people's file")
	assert.False(t, strings.Contains(out, "token:"), "no token in the file")
}
