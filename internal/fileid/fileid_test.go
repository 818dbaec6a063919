package fileid

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecreatedFileDiffers reads identities of real files on the test's
// filesystem: a file written to (its data, mtime and ctime changed) keeps
// its identity, one deleted and recreated at the same path does not, even
// where the host hands out its old inode number again.
func TestRecreatedFileDiffers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vol.qcow2")
	require.NoError(t, os.WriteFile(path, []byte("QFI\xfb"), 0o600))
	first := Of(path)
	require.NotEmpty(t, first)
	if !Tells(first) {
		t.Skipf("the test's filesystem tells no birth time and no file handle (%q)", first)
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(make([]byte, 4096))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(path, later, later))
	assert.Equal(t, first, Of(path), "a write keeps the file's identity")
	assert.Empty(t, Differ(first, Of(path)))

	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, []byte("QFI\xfb"), 0o600))
	second := Of(path)
	assert.NotEmpty(t, Differ(first, second), "recreated: %q, was %q", second, first)
}

func TestDiffer(t *testing.T) {
	for _, tc := range []struct {
		name, recorded, live, want string
	}{
		{"same", "ino=5 btime=10.000000001 fh=1:0500000001000000", "ino=5 btime=10.000000001 fh=1:0500000001000000", ""},
		{"inode number reused, born later", "ino=5 btime=10.000000001", "ino=5 btime=11.000000000", "btime"},
		{"inode number reused, new generation", "ino=5 fh=1:0500000001000000", "ino=5 fh=1:0500000002000000", "fh"},
		{"another inode", "ino=5", "ino=6", "ino"},
		{"only the inode number in common, equal: not told", "ino=5 btime=10.000000001", "ino=5", ""},
		{"nothing in common", "btime=10.000000001", "fh=1:05", ""},
		{"nothing recorded", "", "ino=5 btime=10.000000001", ""},
		{"nothing live", "ino=5 btime=10.000000001", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Differ(tc.recorded, tc.live))
		})
	}
}

func TestOfAMissingFileIsEmpty(t *testing.T) {
	assert.Empty(t, Of(filepath.Join(t.TempDir(), "absent")))
}
