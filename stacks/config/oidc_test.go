package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
	"github.com/milner/milner/tests/testpki"
)

// withOIDC is the base config with a valid milner:cluster.oidc block.
func withOIDC() obj {
	c := baseConfig()
	at(c, "cluster")["oidc"] = obj{
		"issuerUrl": "https://sso.example.org/realms/site", "clientId": "kubernetes",
		"usernameClaim": "preferred_username", "groupsClaim": "groups",
		"groupBindings": obj{"platform-admins": "cluster-admin"},
	}
	return c
}

func TestOIDCDefaults(t *testing.T) {
	cfg, err := configtest.Load(raw(t, withOIDC()), "milner:vaultToken")
	require.NoError(t, err)
	o := cfg.Cluster.OIDC
	require.NotNil(t, o)
	assert.Equal(t, "oidc:", *o.UsernamePrefix)
	assert.Equal(t, "oidc:", *o.GroupsPrefix)
	assert.Equal(t, []string{"profile", "groups"}, o.OIDCScopes())
}

func TestOIDCWithCAIsValid(t *testing.T) {
	c := withOIDC()
	now := time.Now()
	at(c, "cluster", "oidc")["issuerCa"] = testpki.NewCA(now.Add(-time.Hour), now.Add(time.Hour)).Server([]string{"sso.example.org"}, now.Add(-time.Hour), now.Add(time.Hour)).CA
	_, err := configtest.Load(raw(t, c), "milner:vaultToken")
	require.NoError(t, err)
}

// TestOIDCRefusals: each refusal of the issue, by its config path.
func TestOIDCRefusals(t *testing.T) {
	set := func(k string, v any) func(obj) { return func(c obj) { at(c, "cluster", "oidc")[k] = v } }
	for _, tc := range []struct {
		name string
		edit func(obj)
		want string
	}{
		{"issuer http", set("issuerUrl", "http://sso.example.org/realms/site"), "milner:cluster.oidc.issuerUrl: \"http://sso.example.org/realms/site\" is not an https:// URL"},
		{"issuer no scheme", set("issuerUrl", "sso.example.org"), "milner:cluster.oidc.issuerUrl:"},
		{"issuer with query", set("issuerUrl", "https://sso.example.org/?realm=site"), "milner:cluster.oidc.issuerUrl:"},
		{"no client id", set("clientId", ""), "milner:cluster.oidc.clientId: is required"},
		{"no username claim", set("usernameClaim", ""), "milner:cluster.oidc.usernameClaim: is required"},
		{"no groups claim", set("groupsClaim", ""), "milner:cluster.oidc.groupsClaim: is required"},
		{"username prefix empty", set("usernamePrefix", ""), `milner:cluster.oidc.usernamePrefix: "" leaves users unprefixed`},
		{"username prefix dash", set("usernamePrefix", "-"), `milner:cluster.oidc.usernamePrefix: "-" leaves users unprefixed`},
		{"username prefix system", set("usernamePrefix", "system:"), `milner:cluster.oidc.usernamePrefix: "system:" lets a token name system: users`},
		{"username prefix under system", set("usernamePrefix", "system:oidc:"), `milner:cluster.oidc.usernamePrefix: "system:oidc:" lets a token name system: users`},
		{"username prefix start of system", set("usernamePrefix", "sys"), `milner:cluster.oidc.usernamePrefix: "sys" lets a token name system: users`},
		{"groups prefix empty", set("groupsPrefix", ""), `milner:cluster.oidc.groupsPrefix: "" leaves groups unprefixed`},
		{"groups prefix dash", set("groupsPrefix", "-"), `milner:cluster.oidc.groupsPrefix: "-" leaves groups unprefixed`},
		{"groups prefix system", set("groupsPrefix", "system:"), `milner:cluster.oidc.groupsPrefix: "system:" lets a token name system: groups`},
		{"groups prefix start of system", set("groupsPrefix", "system"), `milner:cluster.oidc.groupsPrefix: "system" lets a token name system: groups`},
		{"issuer ca not pem", set("issuerCa", "not a certificate"), "milner:cluster.oidc.issuerCa: is not PEM CA certificates"},
		{"issuer ca a key", set("issuerCa", testpki.Key()), "milner:cluster.oidc.issuerCa: holds a"},
		{"group with slash", set("groupBindings", obj{"/site/platform-admins": "cluster-admin"}), "milner:cluster.oidc.groupBindings[/site/platform-admins]: group"},
		{"empty role", set("groupBindings", obj{"platform-admins": ""}), `milner:cluster.oidc.groupBindings[platform-admins]: "" is not a ClusterRole name`},
		{"unknown key", set("issuer", "https://x"), `milner:cluster.oidc: unknown key "issuer"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := withOIDC()
			tc.edit(c)
			_, err := configtest.Load(raw(t, c), "milner:vaultToken")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestOIDCProblemsAllAtOnce(t *testing.T) {
	c := withOIDC()
	o := at(c, "cluster", "oidc")
	o["issuerUrl"] = "http://sso"
	o["usernamePrefix"] = "-"
	o["groupsPrefix"] = ""
	at(c, "nodes", 0)["memoryMiB"] = 512
	_, err := configtest.Load(raw(t, c), "milner:vaultToken")
	var cerr *config.ConfigError
	require.ErrorAs(t, err, &cerr)
	assert.Len(t, cerr.Problems, 4, strings.Join(cerr.Problems, "\n"))
}

func TestOIDCOnExistingClusterIsRefused(t *testing.T) {
	c := obj{"startAt": "apps", "cluster": obj{"name": "x", "oidc": at(withOIDC(), "cluster", "oidc")},
		"apps": baseConfig()["apps"]}
	r := raw(t, c)
	r["milner:kubeconfig"] = "apiVersion: v1"
	_, err := configtest.Load(r, "milner:vaultToken", "milner:kubeconfig")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:cluster.oidc: is not used when milner:startAt is apps")
}
