package stacks_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
)

// obj, baseConfig, raw and at are the shared fixtures (see configtest).
type obj = configtest.Obj

var (
	baseConfig = configtest.Base
	raw        = configtest.Raw
	at         = configtest.At
)

// testChart is the project's test chart, relative to this package's
// directory (the working directory of its tests, and of the program under
// mocks, which runs with no project root).
const testChart = "../tests/charts/milner-test"

func TestBaseConfigRegisters(t *testing.T) {
	rec, err := offline.Run(stacks.Program, "t", raw(t, baseConfig()), "milner:vaultToken")
	require.NoError(t, err)
	assert.NotEmpty(t, rec.Registrations())
}

// TestRefusedConfigRegistersNothing: the program loads its config before it
// registers anything, so a config Load refuses (stacks/config's tables)
// registers nothing.
func TestRefusedConfigRegistersNothing(t *testing.T) {
	c := baseConfig()
	at(c, "nodes", 0)["memoryMiB"] = 512
	rec, err := offline.Run(stacks.Program, "t", raw(t, c), "milner:vaultToken")
	var cerr *config.ConfigError
	require.ErrorAs(t, err, &cerr)
	assert.Empty(t, rec.Registrations(), "a bad config must register nothing")
}

// TestLocalChartRelease: a local chart reaches the Helm release as its path
// (as written: relative to the project directory, where the engine starts
// the provider), with no repository and no version.
func TestLocalChartRelease(t *testing.T) {
	c := baseConfig()
	at(c, "apps", 0)["chart"] = obj{"path": testChart}
	c["storage"] = obj{"chart": obj{"path": testChart}}
	rec, err := offline.Run(stacks.Program, "t", raw(t, c), "milner:vaultToken")
	require.NoError(t, err)
	for _, name := range []string{"vault-release", config.StorageAppName + "-release"} {
		rel, ok := rec.ByName("kubernetes:helm.sh/v3:Release", name)
		require.True(t, ok, name)
		assert.Equal(t, testChart, rel.Inputs["chart"].StringValue(), name)
		assert.False(t, rel.Inputs.HasValue("repositoryOpts"), name)
		assert.False(t, rel.Inputs.HasValue("version"), name)
	}
}

// TestProfileOnLocalChart: a local chart takes the Woodpecker profile (a
// vendored or forked chart may carry another name); a repository chart of
// another name does not (TestAppsLayerRefusals).
func TestProfileOnLocalChart(t *testing.T) {
	c := baseConfig()
	app := at(c, "apps", 0)
	app["chart"] = obj{"path": testChart}
	delete(app, "secretValues")
	app["woodpecker"] = obj{"host": "https://ci.example.org", "forge": obj{"kind": "github"}}
	r := raw(t, c)
	for _, k := range []string{"woodpeckerAgentSecret", "woodpeckerForgeClient", "woodpeckerForgeSecret"} {
		r["milner:"+k] = "s3cret"
	}
	rec, err := offline.Run(stacks.Program, "t", r, "milner:woodpeckerAgentSecret", "milner:woodpeckerForgeClient", "milner:woodpeckerForgeSecret")
	require.NoError(t, err)
	_, ok := rec.ByName("kubernetes:core/v1:Secret", "vault-"+stacks.WoodpeckerServerSecret)
	assert.True(t, ok, "the Woodpecker profile's server Secret")
}

// TestAdoptImportsExactlyTheNamedObjects: RunOptions.Adopt (milner adopt
// --all's one-shot import of the apps layer) gives exactly the objects it
// names, by logical name, the import of their live ids, in a HelmApp, the
// storage layer and the workloads; Program imports nothing.
func TestAdoptImportsExactlyTheNamedObjects(t *testing.T) {
	c := baseConfig()
	c["workloads"] = obj{"name": "npc", "quota": obj{"requests.cpu": "4", "requests.memory": "8Gi"}}
	imports := func(program func(*stacks.RunOptions)) map[string]string {
		t.Helper()
		opts := &stacks.RunOptions{}
		program(opts)
		rec, err := offline.Run(stacks.NewProgram(opts), "t", raw(t, c), "milner:vaultToken")
		require.NoError(t, err)
		got := map[string]string{}
		for _, r := range rec.Registrations() {
			if r.Options.ImportID != "" {
				got[r.Name] = r.Options.ImportID
			}
		}
		return got
	}
	adopt := map[string]string{
		"vault-ns": "vault", "vault-release": "vault/vault",
		config.StorageAppName + "-release": config.DefaultStorageNamespace + "/" + config.StorageAppName,
		config.StorageAppName + "-class":   "local-path",
		"npc-quota":                        "npc/npc-quota", "npc-priority": "npc",
	}
	assert.Equal(t, adopt, imports(func(o *stacks.RunOptions) { o.Adopt = adopt }))
	assert.Empty(t, imports(func(*stacks.RunOptions) {}))
}
