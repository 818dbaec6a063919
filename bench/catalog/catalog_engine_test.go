//go:build benchengine

package catalog_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/milner/milner/internal/engine"
)

// bootImage is the blank image bench/run.sh makes (no Talos image can be
// downloaded here); the substrate only needs a file to seed the OS disks.
const bootImage = "/var/lib/milner-bench/boot.qcow2"

// TestCatalogEngine previews the substrate changes on the real engine
// against libvirt (qemu:///system, isolated network 10.201.250.0/24), from a
// stack brought up with the base config's substrate layer, and checks the
// rest under mocks. Run by bench/run.sh: go test -tags benchengine ./bench/catalog/
func TestCatalogEngine(t *testing.T) {
	if _, err := os.Stat(bootImage); err != nil {
		t.Skipf("no boot image (run bench/run.sh): %v", err)
	}
	ctx := context.Background()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stackFile := filepath.Join(dir, "Pulumi.catalog.yaml")
	if err := os.WriteFile(stackFile, []byte("config: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	substrate := func(edit func(obj)) map[string]string {
		c := edited(t, edit)
		c["stopAfter"] = "substrate"
		at(c, "substrate", "libvirt")["bootImage"] = bootImage
		return raw(t, c)
	}
	st, err := engine.Open(ctx, engine.Options{
		Stack: "catalog", Repo: repo, StateDir: filepath.Join(dir, "state"), ConfigFile: stackFile,
		Overrides: substrate(nil), Passphrase: "milner-bench", Progress: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The disks are protected: unprotect, then destroy everything.
		_ = st.SetConfig(ctx, substrate(nil))
		if err := st.UnprotectAll(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if _, err := st.Destroy(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if _, err := st.Up(ctx); err != nil {
		t.Fatal(err)
	}
	runCatalog(t, "", func(t *testing.T, ch change) []step {
		if err := st.SetConfig(ctx, substrate(ch.edit)); err != nil {
			t.Fatal(err)
		}
		r, err := st.Preview(ctx, false)
		if err != nil {
			// A change that deletes protected disks is refused by the
			// engine, which is Milner's policy; the steps it planned up to
			// the refusal are still checked.
			if !strings.Contains(err.Error(), "protected") {
				t.Fatalf("%s: %v", ch.name, err)
			}
			t.Logf("%s: the engine refuses: %s", ch.name, lineWith(err.Error(), "protected"))
		}
		return engineSteps(r)
	})
}

// engineSteps turns the engine's changing steps into catalog steps; the
// three steps of a replace (replace, create-replacement, delete-replaced)
// count as one.
func engineSteps(r *engine.Result) []step {
	seen := map[step]bool{}
	var out []step
	for _, s := range r.Changes() {
		op := s.Op
		if op == "create-replacement" || op == "delete-replaced" {
			op = "replace"
		}
		st := step{op, s.Name()}
		if !seen[st] {
			seen[st] = true
			out = append(out, st)
		}
	}
	return out
}

// lineWith returns the first line of s that contains sub.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return s
}
