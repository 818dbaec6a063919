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
