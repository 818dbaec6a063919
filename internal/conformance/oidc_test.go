package conformance

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/testpki"
	"github.com/milner/milner/tools/talos-validate/wire"
)

// TestOIDCConfigsPassTheValidators: the committed dev stack with
// milner:cluster.oidc (and a private issuer CA) renders every control
// plane's API server flags, the CA's mount and its TrustedRootsConfig,
// and Talos' machinery accepts the result at the provider's version
// (the table's generator) and at the nodes' (their minor's validator).
func TestOIDCConfigsPassTheValidators(t *testing.T) {
	s, err := stackfile.Read(filepath.Join(root, "Pulumi.dev.yaml"), nil)
	require.NoError(t, err)
	now := time.Now()
	ca := testpki.NewCA(now.Add(-time.Hour), now.Add(time.Hour)).Server([]string{"sso.example.org"}, now.Add(-time.Hour), now.Add(time.Hour)).CA
	var cluster map[string]any
	require.NoError(t, json.Unmarshal([]byte(s.Raw["milner:cluster"]), &cluster))
	cluster["oidc"] = map[string]any{
		"issuerUrl": "https://sso.example.org/realms/site", "clientId": "kubernetes",
		"usernameClaim": "preferred_username", "groupsClaim": "groups", "issuerCa": ca,
		"groupBindings": map[string]string{"platform-admins": "cluster-admin"},
	}
	b, err := json.Marshal(cluster)
	require.NoError(t, err)
	s.Raw = maps.Clone(s.Raw)
	s.Raw["milner:cluster"] = string(b)
	ev, err := Collect(s)
	require.NoError(t, err)
	ev.Tools = tools

	inputs, err := NodeInputs(ev)
	require.NoError(t, err)
	require.Len(t, inputs, len(s.Config.Nodes))
	var nodes []wire.Node
	for _, name := range slices.Sorted(maps.Keys(inputs)) {
		in := inputs[name]
		joined := strings.Join(in.Patches, "\n")
		assert.Contains(t, joined, `"oidc-issuer-url":"https://sso.example.org/realms/site"`, name)
		assert.Contains(t, joined, `"oidc-groups-prefix":"oidc:"`, name)
		assert.Contains(t, joined, `"kind":"TrustedRootsConfig"`, name)
		nodes = append(nodes, wire.Node{Name: name, ClusterName: in.ClusterName, Endpoint: in.Endpoint,
			KubernetesVersion: in.KubernetesVersion, Contract: in.Contract, MachineType: in.MachineType,
			Patches: in.Patches, Platform: string(in.Platform)})
	}
	assert.Empty(t, talosAtVersions(ev), "both machinery versions accept the OIDC configs")

	// What the provider's machinery generated holds the flags, the mount
	// and the trusted roots document.
	generated, err := runValidator(tools, config.GeneratorMachinery, "generate", nodes)
	require.NoError(t, err)
	for _, n := range generated {
		require.Empty(t, n.Error, n.Name)
		for _, want := range []string{"oidc-issuer-url: https://sso.example.org/realms/site", "oidc-ca-file: /etc/kubernetes/oidc/ca-",
			"hostPath: /etc/ssl/certs/ca-certificates.crt", "kind: TrustedRootsConfig", "name: milner-oidc-issuer"} {
			assert.Contains(t, n.Config, want, n.Name)
		}
	}
}
