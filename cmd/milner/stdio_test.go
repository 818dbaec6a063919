package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestPrintedCredentialsAreMaskedWhereTheyStand runs milner as users do,
// on a backend whose password is the stack's name: what it prints on
// stdout and stderr, from Milner, the engine and the PostgreSQL driver,
// holds no credential of the URL, and every other word, the stack's name
// included, as written.
func TestPrintedCredentialsAreMaskedWhereTheyStand(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), asMain+"=1", asMain+"_ARGS=preview --stack dev -C "+repoRoot(t),
		"PULUMI_BACKEND_URL=postgres://milner:dev@127.0.0.1:9/state?sslmode=disable&sslpassword=k3y",
		"PULUMI_CONFIG_PASSPHRASE=a passphrase long enough for the check",
		"HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.Error(t, err, "nothing listens on port 9: the preview fails")
	out := stdout.String() + stderr.String()
	t.Log(out)
	assert.Contains(t, out, "milner:xxxxx@127.0.0.1:9", "the URL is printed, its password masked")
	assert.NotContains(t, out, ":dev@")
	assert.NotContains(t, out, "k3y")
	assert.Contains(t, out, `stack "dev"`, "a word equal to the password is not a credential")
}

// TestCopyMaskedJoinsSplitWrites: a URL that reaches the pipe in two
// writes is masked whole, and a prompt that ends without a blank is shown
// within hold.
func TestCopyMaskedJoinsSplitWrites(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	var mu sync.Mutex
	var out bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyMasked(lockedWriter{&mu, &out}, r)
	}()
	_, _ = w.WriteString("backend postgres://milner:s3")
	time.Sleep(hold / 5)
	_, _ = w.WriteString("cret@db/state\nType the stack name to confirm: ")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.HasSuffix(out.String(), "confirm: ")
	}, 10*hold, hold/10, "the prompt is shown without its line's end")
	require.NoError(t, w.Close())
	<-done
	assert.Equal(t, "backend postgres://milner:xxxxx@db/state\nType the stack name to confirm: ", out.String())
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestChildrenNeverInheritTheFormerStdio: a process started after the
// redaction holds the pipe in fd's place, not the file fd held before
// (the caller's pipe or terminal): a plugin that outlives a SIGKILLed
// milner must not keep its caller waiting for EOF.
func TestChildrenNeverInheritTheFormerStdio(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer func() { _ = r.Close(); _ = w.Close() }()
	former, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(w.Fd())))
	require.NoError(t, err)
	restore, err := redactFD(int(w.Fd()))
	require.NoError(t, err)
	child := exec.Command("sleep", "30")
	require.NoError(t, child.Start())
	defer func() { _ = child.Process.Kill(); _ = child.Wait(); restore() }()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", child.Process.Pid))
	require.NoError(t, err)
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", child.Process.Pid, fd.Name()))
		assert.NotEqual(t, former, target, "the child holds fd %s on the former file", fd.Name())
	}
}
