// Package harness is what the real-engine test packages (tests/integration,
// tests/kubeapi) share: one build of the milner command per test process,
// removed when the package's tests end, and one writer that sends a
// process's output to the test log line by line. Only tests import it.
package harness

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var milner struct {
	once sync.Once
	bin  string
	err  error
}

// Milner builds cmd/milner of the repository at repo once per test process
// and returns the binary's path.
func Milner(t testing.TB, repo string) string {
	t.Helper()
	milner.once.Do(func() {
		dir, err := os.MkdirTemp("", "milner-test-bin-")
		if err != nil {
			milner.err = err
			return
		}
		milner.bin = filepath.Join(dir, "milner")
		cmd := exec.Command("go", "build", "-o", milner.bin, "./cmd/milner")
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			milner.err = fmt.Errorf("go build ./cmd/milner: %w: %s", err, out)
		}
	})
	if milner.err != nil {
		t.Fatal(milner.err)
	}
	return milner.bin
}

// Run runs the package's tests and then removes the milner binary, which
// outlives every test that used it. A TestMain ends with os.Exit(Run(m)).
func Run(m *testing.M) int {
	code := m.Run()
	if milner.bin != "" {
		_ = os.RemoveAll(filepath.Dir(milner.bin)) // a leftover temp dir fails nothing
	}
	return code
}

// LogWriter sends what is written to it to the test log, line by line
// (lines up to 1 MiB), until the test's cleanup.
func LogWriter(t testing.TB) io.Writer {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			if line := strings.TrimRight(sc.Text(), " "); line != "" {
				t.Log(line)
			}
		}
	}()
	t.Cleanup(func() { _ = pw.Close(); <-done }) // a pipe's Close never fails
	return pw
}
