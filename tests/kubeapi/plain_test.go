//go:build integration

package kubeapi

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/milner/milner/components/lifecycle"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/tests/harness"
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
//   - a plain `pulumi up --yes` of a harmless change (a chart value) passes;
//   - with the policy pack (--policy-pack, policy/ built) the program
//     passes, and a program declaring a stray unprotected secrets bundle is
//     refused naming milner-protected and milner-secret-outputs, by the
//     CLI and by milner's engine alike.
//
// Passed in 129 s (2026-12-05). It failed with the engine's pack load
// removed (no violations) and with lifecycle.Hooks.Release binding no hook
// ("a plain pulumi preview of the release's removal passed"). The directory
// form `--policy-pack policy` (Pulumi's Go language host) was not run.
func TestPlainPulumiKeepsMilnersRules(t *testing.T) {
	api := startAPIServer(t)
	s := newAppsScenario(t, api, testApp("keep"), testApp("other"), woodpeckerApp())
	s.up("install") // milner records the hooks with the state

	addr, stop, err := engine.ServeProgram(stacks.Program)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// The policy pack, policy/, built as the binary analyzer the CLI
	// launches when --policy-pack names an executable (pkg/v3 v3.276.0
	// resource/plugin analyzer_plugin.go NewPolicyAnalyzer): the directory
	// form would build it through pulumi-language-go, absent here.
	pack := filepath.Join(t.TempDir(), "milner-policy")
	build := exec.Command("go", "build", "-o", pack, "./policy")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./policy: %v\n%s", err, out)
	}
	client := addr
	plain := func(args ...string) (int, string) {
		t.Helper()
		full := append(append([]string{"--non-interactive"}, args...), "--stack", stackName, "--client", client, "--color", "never")
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
		t.Fatalf("a plain pulumi up of a harmless change: exit %d:\n%s", code, out)
	}
	if got := s.release("other", "other"); got.revision != 2 {
		t.Errorf("release other after the plain up: revision %d, want 2", got.revision)
	}

	// The policy pack: the program passes it, plainly and under milner.
	if code, _ := plain("preview", "--policy-pack", pack); code != 0 {
		t.Errorf("a plain pulumi preview --policy-pack of the program: exit %d, want 0", code)
	}
	// A program that declares a second, unprotected secrets bundle
	// violates milner-protected and milner-secret-outputs: the CLI's run of
	// policy/ and milner's engine, which loads the same pack in process,
	// both say so.
	leaky := func(ctx *pulumi.Context) error {
		if err := stacks.Program(ctx); err != nil {
			return err
		}
		_, err := machine.NewSecrets(ctx, "stray-secrets", &machine.SecretsArgs{})
		return err
	}
	leakyAddr, stopLeaky, err := engine.ServeProgram(leaky)
	if err != nil {
		t.Fatal(err)
	}
	defer stopLeaky()
	client = leakyAddr
	code, out = plain("preview", "--policy-pack", pack)
	for _, want := range []string{"milner-protected", "stray-secrets (talos:machine/secrets:Secrets) is not protected", "milner-secret-outputs"} {
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("a plain pulumi preview --policy-pack of a stray bundle: exit %d, want a violation saying %q", code, want)
		}
	}
	st, err := engine.Open(context.Background(), engine.Options{Stack: stackName, Dir: s.dir, Tools: toolsBin, Backend: s.backend,
		Passphrase: passphrase, Program: leaky, Progress: harness.LogWriter(t)})
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := st.Preview(context.Background(), engine.PlanOptions{})
	var policies []string
	if r != nil {
		for _, v := range r.Violations {
			policies = append(policies, v.Policy)
		}
	}
	if !errors.Is(err, engine.ErrPolicyViolations) || !slices.Contains(policies, "milner-protected") || !slices.Contains(policies, "milner-secret-outputs") {
		t.Errorf("milner's engine on a stray bundle: %v, violations of %v; want milner-protected and milner-secret-outputs", err, policies)
	}
}
