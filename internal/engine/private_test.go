package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidStackName(t *testing.T) {
	for _, ok := range []string{"dev", "local", "prod-eu.1", "it_2"} {
		if err := ValidStackName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "..", "../dev", "a/b", "/etc/passwd", ".hidden", "-x", "dev\n", "de v", strings.Repeat("a", 101)} {
		if err := ValidStackName(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestOpenRefusesAPathAsStackName(t *testing.T) {
	_, err := Open(t.Context(), Options{Stack: "../../etc/x", Repo: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), `stack name "../../etc/x"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestPrivateDirTightensAndRefusesLinks(t *testing.T) {
	base := t.TempDir()
	loose := filepath.Join(base, "state")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(loose); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(loose); fi.Mode().Perm() != 0o700 {
		t.Errorf("existing dir mode %v, want 0700", fi.Mode().Perm())
	}
	fresh := filepath.Join(base, "a", "b")
	if err := PrivateDir(fresh); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o700 {
		t.Errorf("new dir mode %v, want 0700", fi.Mode().Perm())
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(loose, link); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlinked state dir: err = %v", err)
	}
}

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

func TestDefaultPassphraseOnlyForASecretFreeSubstrateStack(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "Pulumi.local.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("config:\n  milner:stopAfter: substrate\n")
	substrate := map[string]string{"milner:stopAfter": "substrate"}
	if err := defaultPassphraseAllowed("local", plain, substrate); err != nil {
		t.Errorf("secret-free substrate stack: %v", err)
	}
	if err := defaultPassphraseAllowed("local", plain, map[string]string{"milner:stopAfter": "talos"}); err == nil {
		t.Error("a stack past the substrate got the default passphrase")
	}
	if err := defaultPassphraseAllowed("local", plain, map[string]string{}); err == nil {
		t.Error("a stack with the default stopAfter (apps) got the default passphrase")
	}
	if err := defaultPassphraseAllowed("dev", plain, substrate); err == nil {
		t.Error("a stack other than local got the default passphrase")
	}
	secret := write("config:\n  milner:stopAfter: substrate\n  milner:token:\n    secure: v1:abc\n")
	if err := defaultPassphraseAllowed("local", secret, substrate); err == nil || !strings.Contains(err.Error(), "milner:token") {
		t.Errorf("a stack file with a secret: err = %v", err)
	}
	if _, err := passphrase(Options{Stack: "local", ConfigFile: secret}, substrate); err == nil || !strings.Contains(err.Error(), "set MILNER_PASSPHRASE") {
		t.Errorf("passphrase() err = %v", err)
	}
}
