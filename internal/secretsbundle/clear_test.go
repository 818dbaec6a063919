package secretsbundle

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// holderEnv makes the test binary the process that holds a ClearFile until
// it is killed (TestClearFileDiesWithMilner).
const holderEnv = "MILNER_TEST_CLEARFILE_HOLDER"

func TestMain(m *testing.M) {
	if plain := os.Getenv(holderEnv); plain != "" {
		c, err := NewClearFile([]byte(plain))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(c.Path())
		select {} // until SIGKILL
	}
	os.Exit(m.Run())
}

// The provider reads the import id as a path in its own process: another
// process reads the bundle there, no one can change it, and once milner
// closes it the path names nothing.
func TestClearFileIsReadByAnotherProcess(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	c, err := NewClearFile([]byte("cluster:\n  id: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("cat", c.Path()).CombinedOutput()
	if err != nil || string(out) != "cluster:\n  id: x\n" {
		t.Fatalf("cat %s: %q, %v", c.Path(), out, err)
	}
	if f, err := os.OpenFile(c.Path(), os.O_WRONLY, 0); err == nil {
		_, werr := f.WriteString("changed")
		_ = f.Close()
		if werr == nil {
			t.Error("the bundle could be written after it was handed over")
		}
	}
	path := c.Path()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err == nil && string(b) == "cluster:\n  id: x\n" {
		t.Errorf("%s still reads the bundle after Close", path)
	}
}

// A SIGKILL of milner mid-import runs no deferred removal: the clear
// bundle must not be anywhere a file outlives the process.
func TestClearFileDiesWithMilner(t *testing.T) {
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"=the-clear-bundle", "TMPDIR="+tmp)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimSpace(line)
	if b, err := os.ReadFile(path); err != nil || string(b) != "the-clear-bundle" {
		t.Fatalf("while the holder runs, %s: %q, %v", path, b, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if b, err := os.ReadFile(path); err == nil {
		t.Errorf("after SIGKILL, %s still reads %q", path, b)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("after SIGKILL, %s holds %s", tmp, e.Name())
	}
}
