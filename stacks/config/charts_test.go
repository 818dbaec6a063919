package config_test

import (
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

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
		if c := s.Config.Storage.Chart; c != (config.ChartConfig{}) {
			out[s.Name+" milner:storage.chart"] = c
		}
		for _, a := range s.Config.Apps {
			if a.Chart.Path == "" {
				out[s.Name+" milner:apps "+a.Name] = a.Chart
			}
		}
	}
	return out
}

// TestChartSourcesArePublished holds every chart coordinate the committed
// stacks and the defaults use against the record of where the charts'
// maintainers publish them.
func TestChartSourcesArePublished(t *testing.T) {
	for where, c := range committedCharts(t) {
		require.Truef(t, config.Published(c), "%s: chart %s %s from %s is not recorded as published there (PublishedCharts)", where, c.Name, c.Version, c.Repo)
	}
}

// TestUnpublishedSourcesFail: a coordinate nobody publishes is refused by
// the record, the source the storage layer once used among them.
func TestUnpublishedSourcesFail(t *testing.T) {
	for _, c := range []config.ChartConfig{
		{Repo: "https://rancher.github.io/local-path-provisioner", Name: config.StorageChartName, Version: "0.0.33"},
		{Repo: "oci://ghcr.io/woodpecker-ci/helm/woodpecker", Name: config.WoodpeckerChart, Version: "3.2.0"},
		{Repo: "https://helm.releases.hashicorp.com", Name: config.VaultChart, Version: "0.29.0-does-not-exist"},
		{Repo: "https://helm.releases.hashicorp.com", Name: config.WoodpeckerChart, Version: "3.2.0"},
	} {
		require.Falsef(t, config.Published(c), "%+v", c)
	}
}

// TestRecordMatchesUpstreamArchives: every recorded version is one of the
// unmodified upstream archives in ../shared/charts (packaged from the tags
// the record cites), under the same chart name.
func TestRecordMatchesUpstreamArchives(t *testing.T) {
	b, err := os.ReadFile("../../../shared/charts/index.yaml")
	if os.IsNotExist(err) && os.Getenv("CI") == "" {
		t.Skip("../shared/charts is not beside the repository")
	}
	require.NoError(t, err)
	var index struct {
		Entries map[string][]struct {
			Version string `yaml:"version"`
		} `yaml:"entries"`
	}
	require.NoError(t, yaml.Unmarshal(b, &index))
	for _, p := range config.PublishedCharts {
		var have []string
		for _, e := range index.Entries[p.Name] {
			have = append(have, e.Version)
		}
		for _, v := range p.Versions {
			require.Truef(t, slices.Contains(have, v), "%s %s is not in ../shared/charts (has %v)", p.Name, v, have)
		}
	}
}
