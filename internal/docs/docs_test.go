package docs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks/config"
)

// root is the repository root, where the stack files are committed.
const root = "../.."

// TestCommittedDocsMatchTheStacks is the drift gate: the committed docs
// must be exactly what the committed stack configs render to.
func TestCommittedDocsMatchTheStacks(t *testing.T) {
	drifted, err := Sync(root, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(drifted) > 0 {
		t.Fatalf("%v differ from the rendering of the stack configs; run `go run ./cmd/milner docs` and commit the result", drifted)
	}
}

func TestRenderDev(t *testing.T) {
	s, err := stackfile.Read(filepath.Join(root, "Pulumi.dev.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := RenderStack(s)
	for _, want := range []string{
		"## dev\n",
		"| cp-1 | controlplane | 4 | 6144 MiB | 20 GiB | 40 GiB | 10.73.0.11 | — |",
		"| vault | vault | vault | https://helm.releases.hashicorp.com | 0.29.1 | vault |",
		"```mermaid\nflowchart LR\n",
		`cfg_cp_1["cp-1 controlplane config, bootstraps etcd"]`,
		"talos --> health{",
		"health --> apps",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("dev rendering does not contain %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, config.PlaceholderSecret) {
		t.Errorf("the rendering shows a secret placeholder:\n%s", got)
	}
	// Woodpecker is off in dev (no forge), so none of its keys.
	if want := []string{"milner:vaultTlsCa", "milner:vaultTlsCert", "milner:vaultTlsKey"}; strings.Join(s.SecretKeys, ",") != strings.Join(want, ",") {
		t.Errorf("secret keys %q, want %q", s.SecretKeys, want)
	}
}

func TestReplaceSection(t *testing.T) {
	tests := []struct {
		name, text, want string
		ok               bool
	}{
		{"replaces between markers",
			"a\n" + BeginMarker + "\nold\n" + EndMarker + "\nb\n",
			"a\n" + BeginMarker + "\n" + header + "new\n" + EndMarker + "\nb\n", true},
		{"no markers", "a\nb\n", "a\nb\n", false},
		{"markers out of order", EndMarker + "\n" + BeginMarker + "\n", EndMarker + "\n" + BeginMarker + "\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ReplaceSection(tt.text, "new\n")
			if got != tt.want || ok != tt.ok {
				t.Errorf("ReplaceSection = %q, %v; want %q, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestDriftIsCaught(t *testing.T) {
	dir := t.TempDir()
	stack, err := os.ReadFile(filepath.Join(root, "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme := "# x\n" + BeginMarker + "\n" + EndMarker + "\n"
	for name, text := range map[string]string{"Pulumi.dev.yaml": string(stack), "README.md": readme} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	written, err := Sync(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README.md", CompatibilityFile, File}; !slices.Equal(written, want) {
		t.Fatalf("wrote %q, want %q", written, want)
	}
	if drifted, err := Sync(dir, false); err != nil || len(drifted) != 0 {
		t.Fatalf("right after Sync: drifted %q, %v", drifted, err)
	}

	// A hand edit of the docs, then a config change the docs do not follow.
	if err := os.WriteFile(filepath.Join(dir, File), []byte("hand-edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(stack), "memoryMiB: 6144", "memoryMiB: 8192", 1)
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.dev.yaml"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	drifted, err := Sync(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{File}; !slices.Equal(drifted, want) {
		t.Errorf("drifted %q, want %q", drifted, want)
	}
}

// TestCommittedDocsCiteOnlyWhatExists is the path gate: every repository
// path README.md and docs/ cite exists, and the README's Layout table names
// every top-level folder and package.
func TestCommittedDocsCiteOnlyWhatExists(t *testing.T) {
	problems, err := CheckPaths(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestBadPathsAreCaught: a cited file that does not exist, a link to a
// missing runbook, a package the Layout table leaves out and a doc
// section Go code cites that has no heading are each reported, and so is a
// deep path under a folder that does not exist when its paragraph names no
// tag (the adopt runbook's `tests/testdata/pve/opentofu`); another
// repository's path, its tag in the paragraph, and a glob that matches are not.
func TestBadPathsAreCaught(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"docs/runbooks", "stacks/config", "internal/engine", "internal/gate", "tools/talos-validate-v1.9.5", "bin", "cmd/milner"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range map[string]string{
		".gitignore":                    "/bin/\n",
		"stacks/config/mirrors_test.go": "package config\n",
		"internal/engine/engine.go":     "package engine\n",
		"internal/gate/gate.go":         "package gate\n",
		"docs/runbooks/state.md":        "# State\n",
		"README.md": "# x\n\n## Layout\n\n| path | what |\n|---|---|\n| `stacks/` | config |\n| `internal/engine` | engine |\n| `docs/`, `tools/` | docs |\n\n## Next\n\n" +
			"Tested in `stacks/config/mirrors_test.go`, not `stacks/mirrors_test.go`.\n" +
			"See [state](docs/runbooks/state.md#restore) and [recover](docs/runbooks/recover.md).\n" +
			"Talos v1.11.5 `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go`; `tools/talos-validate-v*`; `stacks/nope-v*`; `stacks/config.Load`; `stacks/config.go`.\n" +
			"\nFrom the live VM's config (`stacks/testdata/pve/opentofu`), no tag in its paragraph.\n",
		"docs/runbooks/adopt.md": "[state](state.md), [cli](../cli.md), `cmd/milner/bootstrap.go`\n",
		"internal/gate/cite.go":  "package gate\n\n// docs/runbooks/state.md \"Restore\"\nconst a = \"see docs/runbooks/state.md \\\"State\\\"\"\nconst b = \"see docs/runbooks/state.md \\\"Gone\\\" and docs/missing.md \\\"X\\\"\"\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := CheckPaths(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:13: cites `stacks/mirrors_test.go`, which does not exist",
		"README.md:14: links to docs/runbooks/recover.md, which does not exist",
		"README.md:15: cites `stacks/nope-v*`, which does not exist",
		"README.md:15: cites `stacks/config.go`, which does not exist",
		"README.md:17: cites `stacks/testdata/pve/opentofu`, which does not exist",
		"docs/runbooks/adopt.md:1: links to ../cli.md, which does not exist",
		"docs/runbooks/adopt.md:1: cites `cmd/milner/bootstrap.go`, which does not exist",
		"README.md: the ## Layout table does not name the folder `cmd/`",
		"README.md: the ## Layout table does not name the package `internal/gate`",
		`internal/gate/cite.go:3: cites docs/runbooks/state.md "Restore", which has no such heading`,
		`internal/gate/cite.go:5: cites docs/runbooks/state.md "Gone", which has no such heading`,
		"internal/gate/cite.go:5: cites docs/missing.md, which does not exist",
	}
	if !slices.Equal(got, want) {
		t.Errorf("CheckPaths:\n got %q\nwant %q", got, want)
	}
}

// TestEachFactOnce: no sentence of the committed docs stands in two of them.
func TestEachFactOnce(t *testing.T) {
	problems, err := CheckRepeats(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestRepeatsAreCaught: a sentence two docs tell is reported once, naming
// both, whatever its case, spacing or line breaks; a short one, a command
// in a code block and a generated doc's text are not.
func TestRepeatsAreCaught(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "docs", "runbooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	fact := "The backend is looked up in MILNER_BACKEND, then the stack file, then the default."
	cmd := "```sh\nmilner up --stack dev --yes --remove w-2 # the same command in two runbooks\n```\n"
	for name, text := range map[string]string{
		"README.md":              "# x\n\n" + fact + " See the runbook.\n\n" + cmd,
		"docs/runbooks/state.md": "# State\n\nSee the runbook. the backend is looked up in MILNER_BACKEND,\nthen the stack  file, then the default.\n\n" + cmd,
		File:                     fact + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := CheckRepeats(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`README.md, docs/runbooks/state.md: tells again "the backend is looked up in milner_backend, then the stack file, then the default"`}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
