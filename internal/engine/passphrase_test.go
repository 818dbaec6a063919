package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWeakPassphraseSpellings: a passphrase is judged trimmed, so white
// space does not make an empty or public one strong, and a short one is
// refused (weakPassphrase).
func TestWeakPassphraseSpellings(t *testing.T) {
	require.NoError(t, os.Unsetenv(PassphraseEnv))
	t.Setenv(PassphraseFileEnv, "")
	talos := &workspace.ProjectStack{Config: config.Map{}}
	for _, tc := range []struct{ pass, want string }{
		{" \t ", "empty or white space"},
		{" " + NoSecretsPassphrase + "\n", "public"},
		{"hunter2", "shorter than 8"},
		{"pässwör", "shorter than 8"}, // 7 characters, 9 bytes
	} {
		_, err := passphrase(Options{Stack: "dev", Passphrase: tc.pass}, talos)
		assert.ErrorContains(t, err, tc.want, "%q", tc.pass)
	}
	p, err := passphrase(Options{Stack: "dev", Passphrase: "eight ch"}, talos)
	require.NoError(t, err)
	assert.Equal(t, "eight ch", p)
}

// TestPassphraseFileIsPrivate: the file is checked as opened (fstat) and
// must be the user's own, in a directory no one else can write.
func TestPassphraseFileIsPrivate(t *testing.T) {
	require.NoError(t, os.Unsetenv(PassphraseEnv))
	talos := &workspace.ProjectStack{Config: config.Map{}}
	write := func(dir string, dirMode os.FileMode) string {
		require.NoError(t, os.MkdirAll(dir, 0o700))
		f := filepath.Join(dir, "pass")
		require.NoError(t, os.WriteFile(f, []byte("a-real-one\n"), 0o600))
		require.NoError(t, os.Chmod(dir, dirMode))
		return f
	}
	root := t.TempDir()
	for _, tc := range []struct {
		name string
		file func() string
		want string
	}{
		{"group-writable directory", func() string { return write(filepath.Join(root, "gw"), 0o770) }, "writable by others"},
		{"world-writable directory", func() string { return write(filepath.Join(root, "ww"), 0o757) }, "writable by others"},
		{"a directory", func() string {
			d := filepath.Join(root, "dir")
			require.NoError(t, os.Mkdir(d, 0o700))
			return d
		}, "not a regular file"},
		{"another user's file", func() string {
			f := write(filepath.Join(root, "theirs"), 0o700)
			chownOrSkip(t, f)
			return f
		}, "is owned by uid 65534"},
		{"another user's directory", func() string {
			d := filepath.Join(root, "their-dir")
			f := write(d, 0o755)
			chownOrSkip(t, d)
			return f
		}, "owned by uid 65534, who can replace it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.file()
			t.Setenv(PassphraseFileEnv, f)
			_, err := passphrase(Options{Stack: "dev"}, talos)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	// A sticky world-writable directory (as /tmp) cannot have the file replaced.
	f := write(filepath.Join(root, "sticky"), os.ModeSticky|0o777)
	t.Setenv(PassphraseFileEnv, f)
	p, err := passphrase(Options{Stack: "dev"}, talos)
	require.NoError(t, err)
	assert.Equal(t, "a-real-one", p)
	assert.False(t, strings.ContainsAny(p, "\r\n"))
}

// chownOrSkip gives path to uid 65534 (nobody), which only root can do.
func chownOrSkip(t *testing.T, path string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	require.NoError(t, os.Chown(path, 65534, 65534))
}
