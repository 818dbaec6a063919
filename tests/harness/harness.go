// Package harness is what the real-engine test packages (tests/integration,
// tests/kubeapi, tests/pveengine) share: one build of the milner command per
// test process, one writer that sends a process's output to the test log
// line by line, and the re-run of a test inside a network namespace it
// makes. Only tests import it.
package harness

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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

// InNetns reports whether the calling test is the re-run inside its
// network namespace (Rerun sets env to the namespace's name). Outside it,
// a test that is not root is skipped: only root makes namespaces.
func InNetns(t *testing.T, env string) bool {
	t.Helper()
	if os.Getenv(env) != "" {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	return false
}

// NewNetns adds the network namespace "<prefix>-<pid>" with its loopback
// up and returns its name; it is deleted, with its /etc/netns directory
// (the files `ip netns exec` mounts over /etc), when the test ends.
func NewNetns(t *testing.T, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", prefix, os.Getpid())
	IP(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run(); _ = os.RemoveAll("/etc/netns/" + ns) })
	IP(t, "-n", ns, "link", "set", "lo", "up")
	return ns
}

// IP runs ip(8) with args and fails t if it fails.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Rerun runs the calling test again, its own binary put inside namespace
// ns by enter (`ip netns exec <ns>`, or `nsenter --net=...`), with env set
// to ns (InNetns) and its output the test's. It fails t if that run
// failed.
func Rerun(t *testing.T, env, ns string, timeout time.Duration, enter ...string) {
	t.Helper()
	args := append(slices.Clone(enter), os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout="+timeout.String())
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env+"="+ns)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("in namespace %s: %s", ns, time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("the scenario in the namespace failed (its output is above): %v", err)
	}
}
