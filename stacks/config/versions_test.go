package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSupportedVersionsTable: the committed table parses, and every rule
// of its reader holds on it.
func TestSupportedVersionsTable(t *testing.T) {
	require.NotEmpty(t, Supported)
	assert.Equal(t, "v1.12.0", GeneratorMachinery)
	assert.Equal(t, []string{"v1.9.5", "v1.10.9", "v1.11.6", "v1.12.0", "v1.12.7", "v1.13.9"}, Validators())
	for _, r := range Supported {
		lo, hi := r.KubernetesRange()
		assert.NotEmpty(t, lo, r.Minor)
		assert.NoError(t, r.SupportsKubernetes(r.Kubernetes), "%s: its own Kubernetes", r.Minor)
		assert.NotEmpty(t, hi)
	}
}

// TestSupportedVersionsTableRefusesBadRows: what the reader refuses in a
// row, one case per rule.
func TestSupportedVersionsTableRefusesBadRows(t *testing.T) {
	const head = "talos latest kubernetes validator\n"
	const gen = "generator v1.12.0\n"
	tests := []struct{ name, text, want string }{
		{"no header", "v1.13 v1.13.9 v1.36.3 v1.13.9\n" + gen, "want the header"},
		{"a skipped minor", head + "v1.11 v1.11.6 v1.34.1 v1.11.6\nv1.13 v1.13.9 v1.36.3 v1.13.9\n" + gen, "v1.13 follows v1.11: minors must be consecutive"},
		{"latest of another minor", head + "v1.13 v1.12.11 v1.36.3 v1.13.9\n" + gen, "latest v1.12.11 is not a v1.13 release"},
		{"validator newer than latest", head + "v1.13 v1.13.2 v1.36.3 v1.13.9\n" + gen, "validator v1.13.9 is not a v1.13 release up to v1.13.2"},
		{"kubernetes outside machinery's range", head + "v1.13 v1.13.9 v1.37.0 v1.13.9\n" + gen, "Talos v1.13 supports Kubernetes v1.31 to v1.36"},
		{"a minor machinery does not know", head + "v1.14 v1.14.0 v1.37.0 v1.14.0\n" + gen, "does not know Talos v1.14"},
		{"a pre-release", head + "v1.13 v1.13.0-rc.0 v1.36.3 v1.13.0-rc.0\n" + gen, "is not an exact release version"},
		{"no generator", head + "v1.13 v1.13.9 v1.36.3 v1.13.9\n", "no generator line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parseSupported(tt.text)
			require.Error(t, err)
			assert.True(t, strings.Contains(err.Error(), tt.want), "%v, want %q", err, tt.want)
		})
	}
}

func TestNextPatch(t *testing.T) {
	tests := []struct{ in, want string }{
		{"v1.9.5", "v1.9.6"},
		{"v1.13.9", "v1.13.10"},
		{"v1.9", ""},
		{"1.9.5", ""},
		{"v1.9.5-beta.1", ""},
		{"v1.9.5+build", ""},
	}
	for _, tt := range tests {
		got, err := NextPatch(tt.in)
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("NextPatch(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
