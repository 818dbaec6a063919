package tests

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
)

// TestSecretsImportDeclaresTheProgramsBundle: the program `milner secrets
// import` runs declares the dev stack's secrets bundle and nothing else,
// exactly as stacks.Program does (name, inputs, protect, ignoreChanges and
// the AdditionalSecretOutputs that keep the imported keys encrypted in
// state), plus the one-shot import id; Program itself carries no import id,
// so its later runs never plan an import-replacement. The real engine's
// side: tests/integration TestSecretsImportKeepsTheBundleEncrypted.
func TestSecretsImportDeclaresTheProgramsBundle(t *testing.T) {
	cfg := stackConfig(t, "dev", devSecrets)
	keys := slices.Sorted(maps.Keys(devSecrets))
	prog, err := offline.Run(stacks.Program, "dev", cfg, keys...)
	require.NoError(t, err)
	imp, err := offline.Run(stacks.SecretsBundle("/tmp/bundle.yaml"), "dev", cfg, keys...)
	require.NoError(t, err)

	want, ok := prog.ByName(tSecrets, "milner-dev-secrets")
	require.True(t, ok)
	assert.Empty(t, want.Options.ImportID, "Program must never carry the import id")
	require.Len(t, imp.Registrations(), 1, "the import declares the bundle alone")
	got := imp.Registrations()[0]
	assert.Equal(t, "/tmp/bundle.yaml", got.Options.ImportID)
	got.Options.ImportID = ""
	assert.Equal(t, want, got)
}
