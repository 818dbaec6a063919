package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/milner/milner/internal/stackfile"
)

// committedCharts returns every repository chart the committed stacks and
// the defaults install, by where it was found.
func committedCharts(t *testing.T) map[string]ChartConfig {
	t.Helper()
	files, err := filepath.Glob("../../Pulumi.*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string]ChartConfig{"DefaultStorageChart": DefaultStorageChart}
	for _, f := range files {
		raw, _, err := stackfile.Read(Namespace, f)
		require.NoError(t, err)
		if s, ok := raw["milner:storage"]; ok {
			var storage StorageConfig
			require.NoError(t, json.Unmarshal([]byte(s), &storage), f)
			if storage.Chart != (ChartConfig{}) {
				out[filepath.Base(f)+" milner:storage.chart"] = storage.Chart
			}
		}
		if s, ok := raw["milner:apps"]; ok {
			var apps []AppConfig
			require.NoError(t, json.Unmarshal([]byte(s), &apps), f)
			for _, a := range apps {
				if a.Chart.Path == "" {
					out[filepath.Base(f)+" milner:apps "+a.Name] = a.Chart
				}
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
		require.Truef(t, Published(c), "%s: chart %s %s from %s is not recorded as published there (PublishedCharts)", where, c.Name, c.Version, c.Repo)
	}
}

// TestUnpublishedSourcesFail: a coordinate nobody publishes is refused by
// the record, the source the storage layer once used among them.
func TestUnpublishedSourcesFail(t *testing.T) {
	for _, c := range []ChartConfig{
		{Repo: "https://rancher.github.io/local-path-provisioner", Name: StorageChartName, Version: "0.0.33"},
		{Repo: "oci://ghcr.io/woodpecker-ci/helm/woodpecker", Name: WoodpeckerChart, Version: "3.2.0"},
		{Repo: "https://helm.releases.hashicorp.com", Name: VaultChart, Version: "0.29.0-does-not-exist"},
		{Repo: "https://helm.releases.hashicorp.com", Name: WoodpeckerChart, Version: "3.2.0"},
	} {
		require.Falsef(t, Published(c), "%+v", c)
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
	for _, p := range PublishedCharts {
		var have []string
		for _, e := range index.Entries[p.Name] {
			have = append(have, e.Version)
		}
		for _, v := range p.Versions {
			require.Truef(t, slices.Contains(have, v), "%s %s is not in ../shared/charts (has %v)", p.Name, v, have)
		}
	}
}
