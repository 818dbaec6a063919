//go:build integration

package kubeapi

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/milner/milner/components/lifecycle"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/stacks"
)

// TestPlainPulumiKeepsMilnersRules runs the pinned `pulumi` CLI, plain,
// on a stack milner brought up: its own engine (pkg/v3 v3.276.0, the
// release milner links), its own preview and up, no milner between.
//
// The one substitution: the CLI starts the language runtime Pulumi.yaml
// names (`go`), and pulumi-language-go is a module the Go module proxy
// does not serve here, so the test serves the program itself as a language
// runtime (engine.ServeProgram, what the Automation API does for an inline
// program) and passes its address with the CLI's own `--client` flag.
// The program is stacks.Program, compiled into the test, with no run
// options: exactly what `pulumi up` runs.
//
//   - a plain `pulumi preview` of an app's removal fails, naming the hook's
//     rule (lifecycle.KeepRelease) and the release; the release is untouched;
//   - a plain `pulumi up --yes` of a harmless change (a chart value) passes.
func TestPlainPulumiKeepsMilnersRules(t *testing.T) {
	api := startAPIServer(t)
	s := newAppsScenario(t, api, testApp("keep"), testApp("other"))
	s.up("install") // milner records the hooks with the state

	addr, stop, err := engine.ServeProgram(stacks.Program)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	plain := func(args ...string) (int, string) {
		t.Helper()
		full := append(append([]string{"--non-interactive"}, args...), "--stack", stackName, "--client", addr, "--color", "never")
		cmd := exec.Command(filepath.Join(toolsBin, "pulumi"), full...)
		cmd.Dir = s.dir
		cmd.Env = append(os.Environ(), "PULUMI_BACKEND_URL="+s.backend, "PULUMI_CONFIG_PASSPHRASE="+passphrase,
			"PULUMI_SKIP_UPDATE_CHECK=true", "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true",
			"PATH="+toolsBin+string(os.PathListSeparator)+os.Getenv("PATH"))
		start := time.Now()
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("pulumi %v: %v", args, err)
		}
		t.Logf("pulumi %s: exit %d in %s\n%s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond), out)
		return code, string(out)
	}

	before := s.release("keep", "keep")
	s.remove("keep")
	code, out := plain("preview")
	if code == 0 {
		t.Fatalf("a plain pulumi preview of the release's removal passed")
	}
	for _, want := range []string{`before hook "` + lifecycle.KeepRelease + `" failed`, "refused by Milner's rule " + lifecycle.KeepRelease + ": keep-release"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refused preview does not say %q", want)
		}
	}
	code, out = plain("up", "--yes")
	if code == 0 || !strings.Contains(out, lifecycle.KeepRelease) {
		t.Errorf("a plain pulumi up of the release's removal: exit %d, want a refusal naming %s", code, lifecycle.KeepRelease)
	}
	if after := s.release("keep", "keep"); after.revision != before.revision || after.status != "deployed" {
		t.Errorf("the release after the refused up: %+v, was %+v", after, before)
	}

	// A harmless change: the app back, another's value changed.
	s.apps = append(s.apps, testApp("keep"))
	for i := range s.apps {
		if s.apps[i].Name == "other" {
			s.apps[i].Values = map[string]any{"message": "changed"}
		}
	}
	s.apply()
	if code, out = plain("up", "--yes"); code != 0 {
		t.Fatalf("a plain pulumi up of a harmless change: exit %d", code)
	}
	if got := s.release("other", "other"); got.revision != 2 {
		t.Errorf("release other after the plain up: revision %d, want 2", got.revision)
	}
}
