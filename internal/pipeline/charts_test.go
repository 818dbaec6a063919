package pipeline

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
)

// chartsOp is a run whose apps are Vault and Woodpecker at the given
// versions, fetched from their published repositories through mirrors.
func chartsOp(mirror, vault, woodpecker string) *Op {
	cfg := &config.Config{
		StartAt:   config.LayerSubstrate,
		StopAfter: config.LayerApps,
		Storage:   config.StorageConfig{Enabled: new(bool)},
		Apps: []config.AppConfig{
			{Name: "vault", Chart: config.ChartConfig{Name: config.VaultChart, Repo: "https://helm.releases.hashicorp.com", Version: vault}},
			{Name: "woodpecker", Chart: config.ChartConfig{Name: config.WoodpeckerChart, Repo: "oci://ghcr.io/woodpecker-ci/helm", Version: woodpecker}},
		},
		ChartMirrors: config.ChartMirrors{"https://helm.releases.hashicorp.com": mirror},
	}
	return &Op{Ctx: context.Background(), cfg: cfg}
}

// The unmodified upstream chart repository (../shared/charts), served on
// loopback as the Vault mirror: a version it lists passes, one it does not
// is refused naming the config path and what it lists, and a source that
// cannot be asked is a warning, not a refusal.
func TestChartsPublishedAsksTheSource(t *testing.T) {
	dir := "../../../shared/charts"
	if _, err := os.Stat(dir); os.IsNotExist(err) && os.Getenv("CI") == "" {
		t.Skip("../shared/charts is not beside the repository")
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	// Woodpecker's OCI registry is not asked in this test: its mirror is a
	// dead loopback port, so it is warned about (and not refused).
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "oci://" + closed.Addr().String() + "/helm"
	require.NoError(t, closed.Close())
	op := func(vault string) *Op {
		o := chartsOp(srv.URL, vault, "3.2.1")
		o.cfg.ChartMirrors["oci://ghcr.io/woodpecker-ci/helm"] = dead
		return o
	}

	_, err = chartsPublished(op("0.30.1"))
	require.NoError(t, err, "a version the repository lists")

	_, err = chartsPublished(op("0.28.0"))
	var ref *Refusal
	require.True(t, errors.As(err, &ref), "want a refusal, got %v", err)
	assert.Contains(t, ref.Msg, "milner:apps[0].chart.version: vault 0.28.0 is not published at "+srv.URL+" (it publishes 0.30.1, 0.29.1)")
	assert.NotContains(t, ref.Msg, "apps[1]", "an unreachable source is not refused")
	assert.Contains(t, rulesOf(previewRules), "charts-published")
	assert.Contains(t, rulesOf(upRules), "charts-published")
}
