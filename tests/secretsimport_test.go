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
// exactly as stacks.Program does (name, inputs, protect and the
// AdditionalSecretOutputs that keep the imported keys encrypted in state),
// plus the one-shot import id, and without Program's ignoreChanges on
// talosVersion, so that the import records the stack's config contract
// rather than the provider's "v1.3"; Program itself carries no import id,
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
	assert.Equal(t, []string{"talosVersion"}, want.Options.IgnoreChanges, "Program keeps the contract the bundle was created or imported with")
	require.Len(t, imp.Registrations(), 1, "the import declares the bundle alone")
	got := imp.Registrations()[0]
	assert.Equal(t, "/tmp/bundle.yaml", got.Options.ImportID)
	assert.Empty(t, got.Options.IgnoreChanges, "the import must record the stack's contract, not the provider's v1.3")
	got.Options.ImportID, got.Options.IgnoreChanges = "", want.Options.IgnoreChanges
	assert.Equal(t, want, got)
}
