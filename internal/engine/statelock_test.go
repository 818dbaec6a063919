package engine

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// TestStateEditsHoldTheBackendLock: a state edit (here the protect flags)
// holds the DIY backend's own lock from its export to its import, so a
// plain `pulumi up`, which takes only that lock, cannot write in between;
// and leaves no lock behind.
func TestStateEditsHoldTheBackendLock(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"Pulumi.yaml": "name: locktest\nruntime: go\n", "Pulumi.edit.yaml": "config: {}\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	st, err := Open(ctx, Options{Stack: "edit", Dir: dir, Backend: "file://" + filepath.Join(dir, "state"),
		Passphrase: "correct horse battery staple 42", Program: func(*pulumi.Context) error { return nil }, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var during []Holder
	beforeStateImport = func() {
		if during, err = st.backendLocks(ctx); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { beforeStateImport = func() {} })
	if err := st.Protect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 {
		t.Errorf("backend locks between the edit's export and import: %+v, want the edit's own", during)
	}
	after, err := st.backendLocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 0 {
		t.Errorf("backend locks after the edit: %+v, want none", after)
	}
}

// TestFirstRunSaltUnderTheLock: the first run of a stack writes its
// passphrase salt into the stack file under Milner's lock: while another
// milner holds the lock the run is refused and the file is as it was;
// then, under the lock its own verb holds, it writes the salt, keeping the
// file's comments.
func TestFirstRunSaltUnderTheLock(t *testing.T) {
	dir := t.TempDir()
	const stackFile = "# the salt test\nconfig:\n  salttest:stopAfter: talos # nothing\n"
	for name, text := range map[string]string{"Pulumi.yaml": "name: salttest\nruntime: go\n", "Pulumi.s.yaml": stackFile} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	open := func() *Stack {
		st, err := Open(ctx, Options{Stack: "s", Dir: dir, Backend: "file://" + filepath.Join(dir, "state"),
			Passphrase: "correct horse battery staple 42", Program: func(*pulumi.Context) error { return nil }, Progress: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	release, err := open().Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := open()
	if _, err := st.Up(ctx); !errors.Is(err, ErrLocked) {
		t.Errorf("the first run while another milner holds the lock: %v, want ErrLocked", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "Pulumi.s.yaml")); string(b) != stackFile {
		t.Errorf("the stack file was written without the lock:\n%s", b)
	}
	release()
	// As `milner up` runs it (cmd/milner's run takes the lock, then the
	// engine's first run writes the salt under it): the Stack that holds
	// the lock takes it again, and frees it at its last release.
	mine, err := st.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Up(ctx); err != nil {
		t.Fatalf("the first run under its own verb's lock: %v", err)
	}
	if _, err := open().Lock(ctx); !errors.Is(err, ErrLocked) {
		t.Errorf("another milner while this one still holds its lock: %v, want ErrLocked", err)
	}
	mine()
	other, err := open().Lock(ctx)
	if err != nil {
		t.Fatalf("after the last release: %v, want the lock free", err)
	}
	other()
	b, _ := os.ReadFile(filepath.Join(dir, "Pulumi.s.yaml"))
	if !strings.Contains(string(b), "encryptionsalt: v1:") || !strings.Contains(string(b), "# the salt test") || !strings.Contains(string(b), "# nothing") {
		t.Errorf("after the first run:\n%s", b)
	}
}
