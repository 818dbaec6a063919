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
)

// TestStackFileSecrets: a secret set in a stack file the way the README says
// (`pulumi config set --secret`, the real CLI) reaches the program as a
// secret; neither the work directory nor the state ever holds it in the
// clear; it survives a later SetConfig; a wrong passphrase is refused,
// naming MILNER_PASSPHRASE, before a stack is created.
func TestStackFileSecrets(t *testing.T) {
	const secret, pass = "s3cr3t-e2e-value", "milner-it-secrets"
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte("name: milner\nruntime: go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The user's side: a stack file in a project directory, with its own
	// backend and so its own salt.
	if err := os.MkdirAll(filepath.Join(dir, "user-state"), 0o700); err != nil {
		t.Fatal(err)
	}
	pulumiCLI := func(args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(repo, ".tools", "bin", "pulumi"), append([]string{"--non-interactive"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PULUMI_BACKEND_URL=file://"+filepath.Join(dir, "user-state"),
			"PULUMI_CONFIG_PASSPHRASE="+pass, "PULUMI_SKIP_UPDATE_CHECK=true")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("pulumi %s: %v: %s", strings.Join(args, " "), err, out)
		}
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
	open := func(passphrase string) (*engine.Stack, error) {
		return engine.Open(context.Background(), engine.Options{
			Stack: "sec", Repo: repo, StateDir: state, ConfigFile: stackFile,
			Passphrase: passphrase, Program: program, Progress: logWriter(t),
		})
	}
	if _, err := open("not-the-passphrase"); err == nil || !strings.Contains(err.Error(), engine.PassphraseEnv) {
		t.Fatalf("open with a wrong passphrase: got %v, want an error naming %s", err, engine.PassphraseEnv)
	}
	if _, err := os.Stat(filepath.Join(state, ".pulumi", "stacks", "milner", "sec.json")); !os.IsNotExist(err) {
		t.Fatalf("a wrong passphrase created the stack (stat: %v)", err)
	}
	st, err := open(pass)
	if err != nil {
		t.Fatal(err)
	}
	upAndCheck := func(plain string) {
		t.Helper()
		if _, err := st.Up(context.Background()); err != nil {
			t.Fatal(err)
		}
		outs, err := st.Outputs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if outs["token"] != secret || outs["plain"] != plain {
			t.Errorf("outputs token=%v plain=%v, want the secret and %q", outs["token"], outs["plain"], plain)
		}
	}
	// The in-process preview decrypts the secret config (its lazily derived
	// key) and plans the outputs; the up after it runs the CLI.
	if _, err := st.Preview(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	upAndCheck("hello")
	// A later config change keeps the secret.
	cfg := st.Config()
	cfg["milner:plain"] = "again"
	if err := st.SetConfig(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	upAndCheck("again")

	files := 0
	err = filepath.WalkDir(state, func(path string, d os.DirEntry, err error) error {
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
