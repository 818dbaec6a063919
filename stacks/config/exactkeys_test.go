package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config/configtest"
)

// TestKeysMatchExactly: a key that names a field in another case is an
// unknown key, wherever it stands (exactkeys.go). Each case is one place
// encoding/json alone would have accepted it.
func TestKeysMatchExactly(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c obj)
		want string
	}{
		// A list element (decodeList), lowercased camelCase.
		{"adoptid in a node", func(c obj) { at(c, "nodes", 0)["adoptid"] = "6f1b9ad2-54a8-4a55-9b2c-3f1d2e4c5b6a" },
			`milner:nodes[0]: unknown key "adoptid" (keys are matched exactly: did you mean "adoptId"?)`},
		// An object key (decodeKey), through a pointer field, upper-cased.
		{"URI in substrate.libvirt", func(c obj) { at(c, "substrate", "libvirt")["URI"] = "qemu+tcp://h/system" },
			`milner:substrate.libvirt: unknown key "URI" (keys are matched exactly: did you mean "uri"?)`},
		// A struct inside a list element, the Go field's own name.
		{"Version in an app's chart", func(c obj) { at(c, "apps", 0, "chart")["Version"] = "0.30.0" },
			`milner:apps[0].chart: unknown key "Version" (keys are matched exactly: did you mean "version"?)`},
		// The right key and its case twin: json would let the later one win.
		{"cidr and CIDR", func(c obj) { at(c, "network")["CIDR"] = "10.8.0.0/24" },
			`milner:network: unknown key "CIDR" (keys are matched exactly: did you mean "cidr"?)`},
	} {
		t.Run(tc.name, func(t *testing.T) { requireRefused(t, tc.edit, tc.want) })
	}
}

// TestFreeFormKeysKeepTheirCase: keys of maps (chart values) are the
// user's own and are not matched against fields.
func TestFreeFormKeysKeepTheirCase(t *testing.T) {
	c := baseConfig()
	at(c, "apps", 0)["values"] = obj{"podAnnotations": obj{"Example.org/Owner": "x"}}
	cfg, err := configtest.Load(raw(t, c), "milner:vaultToken")
	require.NoError(t, err)
	assert.Equal(t, obj{"Example.org/Owner": "x"}, cfg.Apps[0].Values["podAnnotations"])
}
