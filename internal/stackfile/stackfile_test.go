package stackfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNodeFieldKeepsCommentsAndOtherNodes(t *testing.T) {
	orig, err := os.ReadFile("../../Pulumi.dev.yaml")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "Pulumi.dev.yaml")
	require.NoError(t, os.WriteFile(path, orig, 0o644))

	before, err := Edit(path, NodeField("cp-2", "adoptId", "0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69"))
	require.NoError(t, err)
	assert.Equal(t, orig, before)

	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(after), "# Secrets are never written here by hand", "comments survive")
	s, err := Read(path, nil)
	require.NoError(t, err)
	committed, err := Read("../../Pulumi.dev.yaml", nil)
	require.NoError(t, err)
	cfg, want := s.Raw, committed.Raw
	assert.NotEqual(t, want["milner:nodes"], cfg["milner:nodes"])
	assert.Contains(t, cfg["milner:nodes"], `"adoptId":"0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69","dataDiskGiB":40,"mac":"52:54:00:73:00:12"`)
	delete(cfg, "milner:nodes")
	delete(want, "milner:nodes")
	assert.Equal(t, want, cfg, "nothing else changes")

	// Setting it again replaces the value.
	_, err = Edit(path, NodeField("cp-2", "adoptId", "11111111-2222-3333-4444-555555555555"))
	require.NoError(t, err)
	s, err = Read(path, nil)
	require.NoError(t, err)
	cfg = s.Raw
	assert.Contains(t, cfg["milner:nodes"], `"adoptId":"11111111-2222-3333-4444-555555555555"`)
	assert.NotContains(t, cfg["milner:nodes"], "0f4a6c1e")
}

func TestNodeFieldUnknownNode(t *testing.T) {
	orig, err := os.ReadFile("../../Pulumi.dev.yaml")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "Pulumi.dev.yaml")
	require.NoError(t, os.WriteFile(path, orig, 0o644))
	_, err = Edit(path, NodeField("cp-9", "adoptId", "x"))
	require.ErrorContains(t, err, `no node "cp-9" in milner:nodes (nodes: [cp-1 cp-2 cp-3])`)
	after, _ := os.ReadFile(path)
	assert.Equal(t, orig, after, "a refused edit leaves the file alone")
}
