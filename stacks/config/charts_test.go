package config_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/chartindex"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks/config"
)

// committedCharts returns every repository chart the committed stacks and
// the defaults install, by where it was found.
func committedCharts(t *testing.T) map[string]config.ChartConfig {
	t.Helper()
	stacks, err := stackfile.ReadDir("../..")
	require.NoError(t, err)
	out := map[string]config.ChartConfig{"DefaultStorageChart": config.DefaultStorageChart}
	for _, s := range stacks {
		for _, c := range s.Config.RemoteCharts() {
			out[s.Name+" "+c.Path] = c.Chart
		}
	}
	return out
}

// TestChartSourcesArePublished holds every chart coordinate the committed
// stacks and the defaults use against the record of where the charts'
// maintainers publish them.
func TestChartSourcesArePublished(t *testing.T) {
	for where, c := range committedCharts(t) {
		i := slices.IndexFunc(config.PublishedCharts, func(p config.PublishedChart) bool { return p.Name == c.Name })
		require.GreaterOrEqualf(t, i, 0, "%s: chart %s has no record of where it is published (PublishedCharts)", where, c.Name)
		require.Equalf(t, config.PublishedCharts[i].Repo, c.Repo, "%s: chart %s", where, c.Name)
	}
}

// TestCommittedVersionsArePublished asks, as the charts-published rule
// does, the unmodified upstream chart repository in ../shared/charts
// (served on loopback) for every version the committed stacks pin.
func TestCommittedVersionsArePublished(t *testing.T) {
	dir := "../../../shared/charts"
	if _, err := os.Stat(dir); os.IsNotExist(err) && os.Getenv("CI") == "" {
		t.Skip("../shared/charts is not beside the repository")
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	for where, c := range committedCharts(t) {
		ok, known, err := chartindex.Published(context.Background(), srv.Client(), srv.URL, c.Name, c.Version)
		require.NoError(t, err)
		require.Truef(t, ok, "%s: %s %s is not in ../shared/charts (has %v)", where, c.Name, c.Version, known)
	}
}
