package stackfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
)

// readWith reads the committed dev stack with lines added to its config
// block, as `milner check` does (no passphrase).
func readWith(t *testing.T, committed, extra string) error {
	t.Helper()
	orig, err := os.ReadFile(committed)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), filepath.Base(committed))
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(orig), "config:\n", "config:\n"+extra, 1)), 0o644))
	_, err = Read(path, nil)
	return err
}

// TestYAMLThatHidesAValue (issue #49, class 4): a value YAML makes into
// something its text does not show is refused at its config path, with
// every other problem of the file.
func TestYAMLThatHidesAValue(t *testing.T) {
	for _, tc := range []struct{ name, extra, want string }{
		{"a binary tag", "  milner:stopAfter: !!binary YXBwcw==\n",
			"milner:stopAfter: its value carries the YAML tag !!binary"},
		{"a string tag on a number", "  milner:waitForApps: !!str true\n",
			"milner:waitForApps: its value carries the YAML tag !!str"},
		{"a merge key", "  milner:chartMirrors:\n    <<: {\"https://helm.releases.hashicorp.com\": \"https://charts.lan/x\"}\n",
			"milner:chartMirrors: holds a merge key (<<)"},
		{"an alias", "  milner:stopAfter: &s apps\n  milner:startAt: *s\n",
			"milner:startAt: is an alias (*s) of a value written elsewhere"},
		{"infinity", "  milner:waitForApps: .inf\n", "milner:waitForApps: its value is .inf"},
		{"a NUL", "  milner:stopAfter: \"apps\\0\"\n", `milner:stopAfter: its value holds a control or invisible character ("\x00")`},
		{"a right-to-left override", "  milner:stopAfter: \"ap\u202eps\"\n", `milner:stopAfter: its value holds a control or invisible character ("\u202e")`},
		{"a line break in quotes", "  milner:stopAfter: \"apps\\nsubstrate\"\n", "milner:stopAfter: its value holds a line break written as an escape or in quotes"},
		{"a line break in a key", "  milner:workloads:\n    \"na\\nme\": x\n", "milner:workloads[na\nme]: its key holds a line break"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := readWith(t, "../../Pulumi.dev.yaml", tc.extra)
			var cfgErr *config.ConfigError
			require.True(t, errors.As(err, &cfgErr), "want a config error, got %v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestBlockScalarsKeepTheirLineBreaks: a block scalar shows its lines.
func TestBlockScalarsKeepTheirLineBreaks(t *testing.T) {
	assert.Empty(t, reviewed([]byte("config:\n  milner:cluster:\n    oidc:\n      issuerCa: |\n        -----BEGIN CERTIFICATE-----\n        AAAA\n        -----END CERTIFICATE-----\n")))
}

// TestCheckSeesWhatTheEngineSees (class 5): `milner check` reads a stack
// without its passphrase, putting placeholders in place of the secrets it
// lacks; a secret the file holds in plain text is judged as the engine
// judges it, refused, never replaced by the placeholder.
func TestCheckSeesWhatTheEngineSees(t *testing.T) {
	err := readWith(t, "../../Pulumi.prod.yaml", "  milner:proxmoxApiToken: root@pam!milner=3f0c9b1e-6a2d-4c8e-9f71-0d5b2a4e8c13\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:proxmoxApiToken: is stored in plain text; run `pulumi config set --secret milner:proxmoxApiToken <value>`")
	assert.NotContains(t, err.Error(), "3f0c9b1e")

	_, err = ReadDir("../..", "prod")
	require.NoError(t, err, "the committed prod stack, its token a placeholder")
}
