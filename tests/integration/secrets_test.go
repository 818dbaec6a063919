//go:build integration

package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/tests/harness"
)

// TestStackFileSecrets: one workflow. A secret set the way the README says
// (`pulumi config set --secret`, the real CLI, in the stack file, with the
// user's backend) reaches the program as a secret when milner runs the same
// project on the same backend; the CLI then reads milner's outputs from
// that same state; a wrong passphrase is refused naming
// PULUMI_CONFIG_PASSPHRASE; the state never holds the secret in the clear.
func TestStackFileSecrets(t *testing.T) {
	const secret, pass = "s3cr3t-e2e-value", "milner-it-secrets"
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	backend := "file://" + state
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte("name: milner\nruntime: go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	pulumiCLI := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(repo, ".tools", "bin", "pulumi"), append([]string{"--non-interactive"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PULUMI_BACKEND_URL="+backend,
			"PULUMI_CONFIG_PASSPHRASE="+pass, "PULUMI_SKIP_UPDATE_CHECK=true")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pulumi %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	pulumiCLI("stack", "init", "sec")
	pulumiCLI("config", "set", "--secret", "milner:token", secret, "--stack", "sec")
	pulumiCLI("config", "set", "milner:plain", "hello", "--stack", "sec")
	stackFile := filepath.Join(dir, "Pulumi.sec.yaml")
	if b, err := os.ReadFile(stackFile); err != nil || strings.Contains(string(b), secret) || !strings.Contains(string(b), "secure:") {
		t.Fatalf("the CLI did not write an encrypted secret (%v):\n%s", err, b)
	}

	program := func(ctx *pulumi.Context) error {
		c := config.New(ctx, "milner")
		ctx.Export("token", c.RequireSecret("token"))
		ctx.Export("plain", pulumi.String(c.Require("plain")))
		return nil
	}
	open := func(passphrase string) *engine.Stack {
		st, err := engine.Open(context.Background(), engine.Options{
			Stack: "sec", Dir: dir, Tools: filepath.Join(repo, ".tools", "bin"), Backend: backend,
			Passphrase: passphrase, Program: program, Progress: harness.LogWriter(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if _, _, err := open("not-the-passphrase").Preview(context.Background(), engine.PlanOptions{}); err == nil || !strings.Contains(err.Error(), engine.PassphraseEnv) {
		t.Fatalf("preview with a wrong passphrase: got %v, want an error naming %s", err, engine.PassphraseEnv)
	}
	st := open(pass)
	upAndCheck := func(plain string) {
		t.Helper()
		if _, err := st.Up(context.Background()); err != nil {
			t.Fatal(err)
		}
		outs, err := st.Outputs(context.Background(), true)
		if err != nil {
			t.Fatal(err)
		}
		if outs["token"] != secret || outs["plain"] != plain {
			t.Errorf("outputs token=%v plain=%v, want the secret and %q", outs["token"], outs["plain"], plain)
		}
		// The user's CLI reads the very same state.
		if got := strings.TrimSpace(pulumiCLI("stack", "output", "token", "--show-secrets", "--stack", "sec")); got != secret {
			t.Errorf("pulumi stack output token: %q, want the secret", got)
		}
	}
	if _, _, err := st.Preview(context.Background(), engine.PlanOptions{}); err != nil {
		t.Fatal(err)
	}
	upAndCheck("hello")
	// A config change made with the CLI is what milner runs next.
	pulumiCLI("config", "set", "milner:plain", "again", "--stack", "sec")
	upAndCheck("again")

	files := 0
	err := filepath.WalkDir(state, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if strings.Contains(string(b), secret) {
			t.Errorf("%s holds the secret in the clear", path)
		}
		files++
		return err
	})
	if err != nil || files == 0 {
		t.Fatalf("walk %s: %v (%d files)", state, err, files)
	}
}
