package vault

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/tests/vaultapi"
)

// TestUnsealFromAFile: the shares file's non-blank lines are the shares.
func TestUnsealFromAFile(t *testing.T) {
	f := vaultapi.Sealed()
	c := serve(t, f)
	file := filepath.Join(t.TempDir(), "shares")
	require.NoError(t, os.WriteFile(file, []byte("s1\n\ns3\ns5\n"), 0o600))
	s, err := c.UnsealFrom(context.Background(), file, "shares-file")
	require.NoError(t, err)
	assert.False(t, s.Sealed)
	assert.Equal(t, 3, f.UnsealCalls())
}

// TestReadToken: a token file's first non-blank line; an empty one is
// refused; a missing file is an error.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(full, []byte("\n root \n"), 0o600))
	token, err := ReadToken(full, "token-file")
	require.NoError(t, err)
	assert.Equal(t, "root", token)

	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = ReadToken(empty, "token-file")
	assert.EqualError(t, err, "empty token")

	_, err = ReadToken(filepath.Join(dir, "none"), "token-file")
	assert.ErrorIs(t, err, os.ErrNotExist)
}
