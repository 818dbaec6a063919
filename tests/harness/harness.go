// Package harness is what the real-engine test packages (tests/integration,
// tests/kubeapi, tests/pveengine) share: one build of the milner command per
// test process, and one writer that sends a process's output to the test log
// line by line. Only tests import it.
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
// and returns the binary's path. The binary (over 500 MB) goes to one path
// per test package under the repository's .tools/test-bin, overwritten by
// the next run: a temporary directory per run was left behind by every run
// a timeout or an interrupt ended, and filled the disk CI runs on.
func Milner(t testing.TB, repo string) string {
	t.Helper()
	milner.once.Do(func() {
		wd, err := os.Getwd() // go test runs a package's tests in its directory
		if err != nil {
			milner.err = err
			return
		}
		milner.bin = filepath.Join(repo, ".tools", "test-bin", filepath.Base(wd), "milner")
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
