//go:build benchengine

package catalog_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

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
	// The stack's project: the repo's Pulumi.yaml and Pulumi.catalog.yaml,
	// rewritten for every change (its passphrase salt kept).
	dir := t.TempDir()
	project, err := os.ReadFile(filepath.Join(repo, "Pulumi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), project, 0o644); err != nil {
		t.Fatal(err)
	}
	stackFile := filepath.Join(dir, "Pulumi.catalog.yaml")
	substrate := func(edit func(obj)) {
		c := edited(t, edit)
		c["stopAfter"] = "substrate"
		at(c, "substrate", "libvirt")["bootImage"] = bootImage
		file := obj{}
		for k, v := range c {
			file["milner:"+k] = v
		}
		b, err := yaml.Marshal(obj{"config": file})
		if err != nil {
			t.Fatal(err)
		}
		if old, err := os.ReadFile(stackFile); err == nil {
			// The first run's salt (milner writes it as Pulumi's ProjectStack
			// does: a key the file lacks goes after the others).
			for _, line := range strings.Split(string(old), "\n") {
				if strings.HasPrefix(line, "encryptionsalt: ") {
					b = append([]byte(line+"\n"), b...)
				}
			}
		}
		if err := os.WriteFile(stackFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	substrate(nil)
	st, err := engine.Open(ctx, engine.Options{
		Stack: "catalog", Dir: dir, Tools: filepath.Join(repo, ".tools", "bin"),
		Backend: "file://" + filepath.Join(dir, "state"), Passphrase: "milner-bench", Progress: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The disks are protected: unprotect, then destroy everything.
		substrate(nil)
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
		substrate(ch.edit)
		r, _, err := st.Preview(ctx, engine.PlanOptions{})
		if err != nil {
			// A change that deletes protected disks is refused, which is
			// Milner's policy: by the program's before-delete hook
			// (milner-keep-persistent) or, without it, by the engine's
			// protect; the steps it planned up to the refusal are still
			// checked.
			refusal := "refused by Milner's rule milner-keep-persistent"
			if !strings.Contains(err.Error(), refusal) {
				refusal = "protected"
			}
			if !strings.Contains(err.Error(), refusal) {
				t.Fatalf("%s: %v", ch.name, err)
			}
			t.Logf("%s: refused: %s", ch.name, lineWith(err.Error(), refusal))
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
		st := step{string(op), s.Name()}
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
