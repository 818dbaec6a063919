package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWritePrivateFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "dev.kubeconfig")
	if err := os.WriteFile(f, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WritePrivateFile(f, []byte("new")); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(f)
	b, _ := os.ReadFile(f)
	if fi.Mode().Perm() != 0o600 || string(b) != "new" {
		t.Errorf("mode %v, content %q; want 0600, new", fi.Mode().Perm(), b)
	}
	target := filepath.Join(dir, "elsewhere")
	link := filepath.Join(dir, "dev.talosconfig")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := WritePrivateFile(link, []byte("secret")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlink: err = %v", err)
	}
	if _, err := os.Stat(target); err == nil {
		t.Error("the link's target was written")
	}
}

// TestCreatePrivateFileNeverOverwrites: a file or link already at the path
// is refused and left as it was; a new file is 0600.
func TestCreatePrivateFileNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "passphrase")
	if err := CreatePrivateFile(f, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(f); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if err := CreatePrivateFile(f, []byte("other")); err == nil || !strings.Contains(err.Error(), "exists; it is never overwritten") {
		t.Errorf("an existing file: err = %v", err)
	}
	if b, _ := os.ReadFile(f); string(b) != "new" {
		t.Errorf("content %q, want the first write's", b)
	}
	link := filepath.Join(dir, "vault.key")
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), link); err != nil {
		t.Fatal(err)
	}
	if err := CreatePrivateFile(link, []byte("secret")); err == nil {
		t.Error("a dangling link was followed")
	}
	if _, err := os.Stat(filepath.Join(dir, "elsewhere")); err == nil {
		t.Error("the link's target was written")
	}
}
