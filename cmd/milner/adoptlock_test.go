package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/pipeline"
)

// TestAdoptTakesTheLock: adopt writes the stack file, previews what it
// wrote and puts the file back on a refusal, so it runs under Milner's
// lock, as every verb that writes: while another milner holds the stack's
// lock, adopt is refused at once (pipeline.ExitRefused) with the lock's message, before
// it reads the substrate (here a libvirt URI on a loopback port nothing
// listens on), and the stack file is as it was.
func TestAdoptTakesTheLock(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"Pulumi.yaml", "Pulumi.dev.yaml"} {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), f))
		require.NoError(t, err)
		b = bytes.Replace(b, []byte("uri: qemu:///system"), []byte("uri: qemu+tcp://127.0.0.1:9/system"), 1)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	state := filepath.Join(dir, "state")
	require.NoError(t, os.Mkdir(state, 0o700))
	env := []string{"PULUMI_HOME=" + filepath.Join(dir, ".pulumi-home"), "PULUMI_BACKEND_URL=file://" + state,
		"PULUMI_CONFIG_PASSPHRASE=correct horse battery staple 42", "HOME=" + dir}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		t.Setenv(k, v)
	}

	ctx := context.Background()
	other, err := engine.Open(ctx, engine.Options{Stack: "dev", Dir: dir, Progress: io.Discard, Program: func(*pulumi.Context) error { return nil }})
	require.NoError(t, err)
	release, err := other.Lock(ctx)
	require.NoError(t, err)
	defer release()

	before, err := os.ReadFile(filepath.Join(dir, "Pulumi.dev.yaml"))
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), asMain+"=1", asMain+"_ARGS=adopt --stack dev --node cp-1 --id 0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69 -C "+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Log(out.String())
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, pipeline.ExitRefused, exit.ExitCode())
	assert.Contains(t, out.String(), "another milner is changing this stack; nothing was changed")
	assert.NotContains(t, out.String(), "127.0.0.1:9", "refused before the substrate is read")
	after, err := os.ReadFile(filepath.Join(dir, "Pulumi.dev.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after))
}
