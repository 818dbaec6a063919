package main

import (
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// asMain, set in a child's environment, makes the test binary run milner's
// main instead of the tests: the child is milner, stdio and all.
const asMain = "MILNER_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		os.Args = append([]string{"milner"}, strings.Fields(os.Getenv(asMain+"_ARGS"))...)
		main()
	}
	os.Exit(m.Run())
}

// repoRoot is the project directory (where Pulumi.yaml is).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestPrintedCredentialsAreMasked runs milner as users do, on a backend
// whose password holds the characters a message ends a URL at ('(', ')',
// a quote), or one the URL should have escaped ('/'), written raw: what it
// prints on stdout and stderr, from Milner, the engine and the PostgreSQL
// driver, holds the password in no spelling (it is masked as a literal,
// internal/redact.Literal; a URL that does not parse is never echoed), nor
// the credential query parameter, and every other word as written.
func TestPrintedCredentialsAreMasked(t *testing.T) {
	for password, shown := range map[string]string{
		"p(a)ss'wd":   "milner:xxxxx@127.0.0.1:9",
		"p(a)ss'w/rd": "postgres://..., not shown: it may hold a password",
	} {
		t.Run(password, func(t *testing.T) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), asMain+"=1", asMain+"_ARGS=preview --stack dev -C "+repoRoot(t),
				"PULUMI_BACKEND_URL=postgres://milner:"+password+"@127.0.0.1:9/state?sslmode=disable&sslpassword=k3y",
				"PULUMI_CONFIG_PASSPHRASE=a passphrase long enough for the check",
				"HOME="+t.TempDir())
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			require.Error(t, err, "nothing listens on port 9: the preview fails")
			out := stdout.String() + stderr.String()
			t.Log(out)
			assert.Contains(t, out, shown)
			for _, form := range []string{password, url.QueryEscape(password), url.PathEscape(password), "p(a)ss"} {
				assert.NotContains(t, out, form)
			}
			assert.NotContains(t, out, "k3y")
			assert.Contains(t, out, `stack "dev"`, "the rest is printed as written")
		})
	}
}
