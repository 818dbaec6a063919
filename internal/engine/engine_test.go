package engine

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/redact"
)

// TestEngineMatchesCLI: milner runs the engine linked into it (pkg/v3 in
// go.mod), users run the pinned CLI built from tools/pulumi/go.mod on the
// same state; both must be the same Pulumi release.
func TestEngineMatchesCLI(t *testing.T) {
	pin := regexp.MustCompile(`github\.com/pulumi/pulumi/pkg/v3 v(\S+)`)
	version := func(file string) string {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		m := pin.FindSubmatch(b)
		require.NotNil(t, m, "%s requires no github.com/pulumi/pulumi/pkg/v3", file)
		return string(m[1])
	}
	assert.Equal(t, version("../../tools/pulumi/go.mod"), version("../../go.mod"))
}

func TestStackNames(t *testing.T) {
	for _, bad := range []string{"", "../prod", "a/b", ".hidden", "a..b", "x y", "a\n"} {
		_, err := Open(t.Context(), Options{Stack: bad, Dir: t.TempDir()})
		assert.ErrorContains(t, err, "not a stack name", "%q", bad)
	}
}

// TestPassphraseRules: the default passphrase only for a stack that can
// hold no secret; Pulumi's own variables otherwise.
func TestPassphraseRules(t *testing.T) {
	t.Setenv(PassphraseEnv, "")
	require.NoError(t, os.Unsetenv(PassphraseEnv))
	t.Setenv(PassphraseFileEnv, "")
	stop := config.MustMakeKey("milner", "stopAfter")
	substrateOnly := &workspace.ProjectStack{Config: config.Map{stop: config.NewValue("substrate")}}
	p, err := passphrase(Options{Stack: "local"}, substrateOnly)
	require.NoError(t, err)
	assert.Equal(t, NoSecretsPassphrase, p)

	talos := &workspace.ProjectStack{Config: config.Map{}}
	_, err = passphrase(Options{Stack: "dev"}, talos)
	assert.ErrorContains(t, err, PassphraseEnv)
	assert.ErrorContains(t, err, "Talos layer")

	withSecret := &workspace.ProjectStack{Config: config.Map{
		stop: config.NewValue("substrate"), config.MustMakeKey("milner", "token"): config.NewSecureValue("x"),
	}}
	_, err = passphrase(Options{Stack: "s"}, withSecret)
	assert.ErrorContains(t, err, "milner:token")

	file := filepath.Join(t.TempDir(), "pass")
	require.NoError(t, os.WriteFile(file, []byte("from-file\n"), 0o600))
	t.Setenv(PassphraseFileEnv, file)
	p, err = passphrase(Options{Stack: "dev"}, talos)
	require.NoError(t, err)
	assert.Equal(t, "from-file", p)
	t.Setenv(PassphraseEnv, "from-env")
	p, err = passphrase(Options{Stack: "dev"}, talos)
	require.NoError(t, err)
	assert.Equal(t, "from-env", p)
}

func TestBackendURL(t *testing.T) {
	t.Setenv("PULUMI_HOME", t.TempDir()) // no stored login
	t.Setenv(BackendEnv, "")
	_, err := backendURL("", &workspace.Project{})
	assert.ErrorContains(t, err, "pulumi login")

	t.Setenv(BackendEnv, "https://api.pulumi.com")
	_, err = backendURL("", &workspace.Project{})
	assert.ErrorContains(t, err, "self-managed")

	t.Setenv(BackendEnv, "postgres://u@localhost/db")
	u, err := backendURL("", &workspace.Project{})
	require.NoError(t, err)
	assert.Equal(t, "postgres://u@localhost/db", u)
	u, err = backendURL("file:///x", &workspace.Project{})
	require.NoError(t, err)
	assert.Equal(t, "file:///x", u, "an explicit URL wins")
}

// TestPrivateStateDir: 0700 on create and when it exists; never a symlink.
func TestPrivateStateDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, privateStateDir("file://"+dir))
	fi, err := os.Stat(filepath.Join(dir, ".pulumi"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())

	require.NoError(t, os.Chmod(filepath.Join(dir, ".pulumi"), 0o755))
	require.NoError(t, privateStateDir("file://"+dir))
	fi, err = os.Stat(filepath.Join(dir, ".pulumi"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())

	link := t.TempDir()
	require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(link, ".pulumi")))
	assert.ErrorContains(t, privateStateDir("file://"+link), "symlink")
}

// TestBackendURLThatDoesNotParseIsNeverEchoed: a password with an
// unescaped '/' makes net/url read part of it as a port, and its error
// quotes that part; milner says how to fix the URL and echoes none of it.
// The password is registered for masking by value before anything can
// print it.
func TestBackendURLThatDoesNotParseIsNeverEchoed(t *testing.T) {
	t.Setenv("PULUMI_HOME", t.TempDir())
	_, err := backendURL("postgres://milner:s3c/ret@db:5432/state", &workspace.Project{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3c")
	assert.NotContains(t, err.Error(), "ret@db")
	assert.Contains(t, err.Error(), "backend URL (postgres://..., not shown: it may hold a password) does not parse as a URL: percent-encode")
	assert.Equal(t, "lock: postgres://milner:xxxxx@db:5432/state", redact.Text("lock: postgres://milner:s3c/ret@db:5432/state"))
}
