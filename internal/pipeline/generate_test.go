package pipeline

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWithin: a path is within a directory after its links are resolved,
// and a sibling whose name starts with the directory's is not.
func TestWithin(t *testing.T) {
	dir := t.TempDir()
	project := filepath.Join(dir, "repo")
	require.NoError(t, os.Mkdir(project, 0o700))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(project, link))
	for _, tc := range []struct {
		path string
		want bool
	}{
		{project, true},
		{filepath.Join(project, "not", "yet"), true},
		{filepath.Join(link, "s"), true},
		{filepath.Join(dir, "repo-secrets"), false},
		{dir, false},
	} {
		got, err := within(tc.path, project)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, tc.path)
	}
}
