package stacks_test

import (
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
)

const crbType = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"

func oidcConfig(bindings obj) obj {
	c := baseConfig()
	at(c, "cluster")["oidc"] = obj{
		"issuerUrl": "https://sso.example.org/realms/site", "clientId": "kubernetes",
		"usernameClaim": "preferred_username", "groupsClaim": "groups", "groupBindings": bindings,
	}
	return c
}

// TestOIDCFlagsOnControlPlanesOnly: every control plane's rendered config
// carries the API server's OIDC flags; a worker's does not (Talos refuses
// cluster.* on a worker).
func TestOIDCFlagsOnControlPlanesOnly(t *testing.T) {
	rec, err := offline.Run(stacks.Program, "t", raw(t, oidcConfig(obj{"platform-admins": "cluster-admin"})), "milner:vaultToken")
	require.NoError(t, err)
	seen := map[string]int{}
	for _, inv := range rec.Invokes() {
		if inv.Token != "talos:machine/getConfiguration:getConfiguration" {
			continue
		}
		role := inv.Args["machineType"].StringValue()
		var patches []string
		for _, p := range inv.Args["configPatches"].ArrayValue() {
			patches = append(patches, p.StringValue())
		}
		joined := strings.Join(patches, "\n")
		seen[role]++
		if role == "controlplane" {
			assert.Contains(t, joined, `"extraArgs":{"oidc-client-id":"kubernetes","oidc-groups-claim":"groups","oidc-groups-prefix":"oidc:","oidc-issuer-url":"https://sso.example.org/realms/site","oidc-username-claim":"preferred_username","oidc-username-prefix":"oidc:"}`)
		} else {
			assert.NotContains(t, joined, "oidc", role)
		}
	}
	assert.Equal(t, map[string]int{"controlplane": 3, "worker": 1}, seen)
}

// TestOIDCGroupBindings: each bound group is one Milner-owned
// ClusterRoleBinding of the prefixed group; a binding removed from config
// is no longer declared, so the engine deletes it.
func TestOIDCGroupBindings(t *testing.T) {
	rec, err := offline.Run(stacks.Program, "t", raw(t, oidcConfig(obj{"platform-admins": "cluster-admin", "auditors": "view"})), "milner:vaultToken")
	require.NoError(t, err)
	require.Len(t, rec.ByType(crbType), 2)
	crb, ok := rec.ByName(crbType, config.OIDCBindingName("platform-admins"))
	require.True(t, ok)
	in := crb.Inputs
	meta := in["metadata"].ObjectValue()
	assert.Equal(t, "milner-oidc-platform-admins", meta["name"].StringValue())
	assert.Equal(t, "milner", meta["labels"].ObjectValue()["app.kubernetes.io/managed-by"].StringValue())
	assert.Equal(t, "cluster-admin", in["roleRef"].ObjectValue()["name"].StringValue())
	assert.Equal(t, "ClusterRole", in["roleRef"].ObjectValue()["kind"].StringValue())
	subj := in["subjects"].ArrayValue()
	require.Len(t, subj, 1)
	assert.Equal(t, resource.PropertyMap{
		"apiGroup": resource.NewProperty("rbac.authorization.k8s.io"),
		"kind":     resource.NewProperty("Group"),
		"name":     resource.NewProperty("oidc:platform-admins"),
	}, subj[0].ObjectValue())
	assert.Contains(t, crb.Provider, "t-k8s", "the cluster's explicit provider")

	rec, err = offline.Run(stacks.Program, "t", raw(t, oidcConfig(obj{"auditors": "view"})), "milner:vaultToken")
	require.NoError(t, err)
	_, ok = rec.ByName(crbType, config.OIDCBindingName("platform-admins"))
	assert.False(t, ok, "a binding removed from config is not declared")
	assert.Len(t, rec.ByType(crbType), 1)
}
