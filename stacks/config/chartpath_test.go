package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
)

// testChart is the project's test chart, relative to this package's
// directory (the working directory of its tests, and of the program under
// mocks, which runs with no project root).
const testChart = "../../tests/charts/milner-test"

// localChart is an app of the base config on a local chart.
func localChart(path string) func(c obj) {
	return func(c obj) { at(c, "apps", 0)["chart"] = obj{"path": path} }
}

// TestLocalChartRefusals: each bad chart.path is refused before anything
// registers, naming its config path.
func TestLocalChartRefusals(t *testing.T) {
	noVersion := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(noVersion, "Chart.yaml"), []byte("apiVersion: v2\nname: x\n"), 0o600))
	for _, tc := range []struct {
		name string
		edit func(c obj)
		want string
	}{
		{"missing directory", localChart("charts/nope"),
			`milner:apps[0].chart.path: "charts/nope" does not exist (a relative path is read from the project directory, where Pulumi.yaml is)`},
		{"missing absolute directory", localChart("/nonexistent/chart"), `milner:apps[0].chart.path: "/nonexistent/chart" does not exist`},
		{"directory without Chart.yaml", localChart("."), `milner:apps[0].chart.path: "." holds no Chart.yaml: not a chart directory`},
		{"a file", localChart("chartpath.go"), `milner:apps[0].chart.path: "chartpath.go" is not a chart directory`},
		{"Chart.yaml without version", localChart(noVersion), "Chart.yaml has no name or no version"},
		{"path with repo and version", func(c obj) {
			at(c, "apps", 0)["chart"] = obj{"path": testChart, "repo": "https://charts.example.org", "version": "1.0.0"}
		}, "milner:apps[0].chart.path: is exclusive with chart.repo, chart.version: a local chart is named and versioned by its own Chart.yaml"},
		{"second app's path", func(c obj) {
			c["apps"] = append(c["apps"].([]any), obj{"name": "web", "chart": obj{"path": "charts/web", "name": "web"}})
		}, `milner:apps[1].chart.path: is exclusive with chart.name`},
		{"storage chart path", func(c obj) { c["storage"] = obj{"chart": obj{"path": "charts/local-path"}} },
			`milner:storage.chart.path: "charts/local-path" does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireRefused(t, tc.edit, tc.want)
		})
	}
}

// TestLocalChartNamedByChartYAML: Load names a local chart from its
// Chart.yaml (stacks' TestLocalChartRelease: what reaches the release).
func TestLocalChartNamedByChartYAML(t *testing.T) {
	c := baseConfig()
	localChart(testChart)(c)
	cfg, err := config.Load(mapSource(raw(t, c)))
	require.NoError(t, err)
	assert.Equal(t, "milner-test", cfg.Apps[0].Chart.Name)
}

// rootSource is a mapSource that knows the project directory, as a
// *pulumi.Context the engine runs does.
type rootSource struct {
	mapSource
	root string
}

func (s rootSource) RootDirectory() string { return s.root }

// TestLocalChartReadFromProjectDirectory: a relative chart.path is read
// from the project directory, not the working directory.
func TestLocalChartReadFromProjectDirectory(t *testing.T) {
	c := baseConfig()
	localChart("tests/charts/milner-test")(c)
	_, err := config.Load(mapSource(raw(t, c)))
	require.Error(t, err, "the working directory (stacks/config/) holds no tests/charts")
	cfg, err := config.Load(rootSource{mapSource(raw(t, c)), "../.."})
	require.NoError(t, err)
	assert.Equal(t, "tests/charts/milner-test", cfg.Apps[0].Chart.Path)
}
