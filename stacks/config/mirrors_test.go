package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
)

func TestMirrorFetchTakesTheLongestPrefixOnPathBoundaries(t *testing.T) {
	m := config.ChartMirrors{
		"oci://ghcr.io":                       "oci://127.0.0.1:5000/ghcr",
		"oci://ghcr.io/rancher":               "oci://registry.lan/rancher",
		"https://helm.releases.hashicorp.com": "http://127.0.0.1:8080",
	}
	for repo, want := range map[string]string{
		"oci://ghcr.io/woodpecker-ci/helm":                    "oci://127.0.0.1:5000/ghcr/woodpecker-ci/helm",
		"oci://ghcr.io/rancher/local-path-provisioner/charts": "oci://registry.lan/rancher/local-path-provisioner/charts",
		"https://helm.releases.hashicorp.com":                 "http://127.0.0.1:8080",
		// a prefix matches whole path segments only
		"oci://ghcr.io.evil.example/x":         "oci://ghcr.io.evil.example/x",
		"https://helm.releases.hashicorp.com2": "https://helm.releases.hashicorp.com2",
		"https://charts.example.org":           "https://charts.example.org",
	} {
		assert.Equal(t, want, m.Fetch(repo), repo)
	}
}

// TestMirrorIsWhereTheReleaseFetchesAndNothingElse: the release fetches
// from the mirror; the stack's coordinates (and the other app) are
// untouched; the preview's list of mirrored charts names every release
// fetched through one, MetalLB's among them.
func TestMirrorIsWhereTheReleaseFetchesAndNothingElse(t *testing.T) {
	c := baseConfig()
	c["chartMirrors"] = obj{"https://charts.example.org": "http://127.0.0.1:8080/charts", "oci://ghcr.io": "oci://localhost:5000/ghcr",
		config.DefaultLoadBalancerChart.Repo: "http://127.0.0.1:8081/metallb"}
	rec, err := offline.Run(stacks.Program, "t", raw(t, c), "milner:vaultToken")
	require.NoError(t, err)
	app, ok := rec.ByName("kubernetes:helm.sh/v3:Release", "vault-release")
	require.True(t, ok)
	assert.Equal(t, "http://127.0.0.1:8080/charts", app.Inputs["repositoryOpts"].ObjectValue()["repo"].StringValue())
	assert.Equal(t, "demo", app.Inputs["chart"].StringValue())
	storage, ok := rec.ByName("kubernetes:helm.sh/v3:Release", config.StorageAppName+"-release")
	require.True(t, ok)
	assert.Equal(t, "oci://localhost:5000/ghcr/rancher/local-path-provisioner/charts/local-path-provisioner", storage.Inputs["chart"].StringValue())
	assert.Equal(t, config.DefaultStorageChart.Version, storage.Inputs["version"].StringValue())

	lb, ok := rec.ByName("kubernetes:helm.sh/v3:Release", config.LoadBalancerAppName+"-release")
	require.True(t, ok)
	assert.Equal(t, "http://127.0.0.1:8081/metallb", lb.Inputs["repositoryOpts"].ObjectValue()["repo"].StringValue())

	cfg, err := configtest.Load(raw(t, c), "milner:vaultToken")
	require.NoError(t, err)
	assert.Equal(t, []config.MirroredChart{
		{App: config.StorageAppName, Published: config.DefaultStorageChart.Repo, Fetch: "oci://localhost:5000/ghcr/rancher/local-path-provisioner/charts"},
		{App: config.LoadBalancerAppName, Published: config.DefaultLoadBalancerChart.Repo, Fetch: "http://127.0.0.1:8081/metallb"},
		{App: "vault", Published: "https://charts.example.org", Fetch: "http://127.0.0.1:8080/charts"},
	}, cfg.Mirrored())
}

func TestNoMirrorFetchesThePublishedSource(t *testing.T) {
	rec, err := offline.Run(stacks.Program, "t", raw(t, baseConfig()), "milner:vaultToken")
	require.NoError(t, err)
	app, ok := rec.ByName("kubernetes:helm.sh/v3:Release", "vault-release")
	require.True(t, ok)
	assert.Equal(t, "https://charts.example.org", app.Inputs["repositoryOpts"].ObjectValue()["repo"].StringValue())
	cfg, err := configtest.Load(raw(t, baseConfig()), "milner:vaultToken")
	require.NoError(t, err)
	assert.Empty(t, cfg.Mirrored())
}

func TestBadMirrors(t *testing.T) {
	for _, tc := range []struct {
		from, to, want string
	}{
		{"https://charts.example.org", "http://charts.lan", `milner:chartMirrors[https://charts.example.org]: mirror "http://charts.lan" is plain http:// off this machine`},
		{"https://charts.example.org", "http://10.0.0.1:8080", `mirror "http://10.0.0.1:8080" is plain http:// off this machine`},
		{"https://charts.example.org", "oci://registry.lan/x", `mirror "oci://registry.lan/x" of a chart repository must be an https:// chart repository`},
		{"oci://ghcr.io", "https://registry.lan", `mirror "https://registry.lan" of an oci:// registry must be an oci:// registry`},
		{"http://charts.example.org", "https://m.lan", `"http://charts.example.org" is not a published chart source prefix`},
		{"oci://ghcr.io/", "oci://m.lan", `milner:chartMirrors[oci://ghcr.io/]: a prefix ends without /`},
		{"oci://ghcr.io", "oci:///ghcr", `mirror "oci:///ghcr" is not a URL`},
	} {
		t.Run(tc.from+" "+tc.to, func(t *testing.T) {
			requireRefused(t, func(c obj) { c["chartMirrors"] = obj{tc.from: tc.to} }, tc.want)
		})
	}
}

func TestLoopbackHTTPMirrorsAreAccepted(t *testing.T) {
	for _, to := range []string{"http://127.0.0.1:8080", "http://[::1]:8080/x", "http://localhost:8080", "https://charts.lan"} {
		c := baseConfig()
		c["chartMirrors"] = obj{"https://charts.example.org": to}
		_, err := offline.Run(stacks.Program, "t", raw(t, c), "milner:vaultToken")
		assert.NoError(t, err, to)
	}
}
