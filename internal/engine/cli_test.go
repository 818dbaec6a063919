package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/mockrun"
)

// fakeCLI is a pinnedCLI whose "pulumi" is a script that appends its
// arguments to a log and prints "ran"; it returns the CLI and a function
// that reads the commands the script actually ran.
func fakeCLI(t *testing.T) (pinnedCLI, func() []string) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "ran.log")
	script := filepath.Join(dir, "pulumi")
	body := "#!/bin/sh\nshift\necho \"$*\" >>" + log + "\necho ran\n"
	require.NoError(t, os.WriteFile(script, []byte(body), 0o700))
	c := pinnedCLI{path: script, stateDir: filepath.Join(dir, "state"), resultReads: new(atomic.Bool)}
	ran := func() []string {
		b, err := os.ReadFile(log)
		if os.IsNotExist(err) {
			return nil
		}
		require.NoError(t, err)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	return c, ran
}

func run(t *testing.T, c pinnedCLI, args ...string) string {
	t.Helper()
	out, _, code, err := c.Run(context.Background(), t.TempDir(), nil, nil, nil, nil, args...)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	return out
}

// TestSelectAnsweredOnlyForExistingStacks: `stack select` of a stack the
// file backend holds needs no CLI; of any other stack the CLI runs, so the
// Automation API still learns it must create it.
func TestSelectAnsweredOnlyForExistingStacks(t *testing.T) {
	c, ran := fakeCLI(t)
	stacks := filepath.Join(c.stateDir, ".pulumi", "stacks", mockrun.Project)
	require.NoError(t, os.MkdirAll(stacks, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(stacks, "dev.json"), []byte("{}"), 0o600))

	assert.Empty(t, run(t, c, "stack", "select", "--stack", "dev"))
	assert.Nil(t, ran(), "selecting an existing stack must not start the CLI")

	assert.Equal(t, "ran\n", run(t, c, "stack", "select", "--stack", "prod"))
	assert.Equal(t, []string{"stack select --stack prod"}, ran())
}

// TestResultReadsAnsweredOnceAfterAnOperation: the Automation API's three
// result reads after an up are answered empty; the next read of the outputs
// (a caller's own, such as milner up's client files) runs the CLI.
func TestResultReadsAnsweredOnceAfterAnOperation(t *testing.T) {
	c, ran := fakeCLI(t)
	outputs := []string{"stack", "output", "--json", "--stack", "dev"}
	history := []string{"stack", "history", "--json", "--show-secrets", "--page-size", "1", "--page", "1", "--stack", "dev"}

	// Before any operation every read runs the CLI.
	assert.Equal(t, "ran\n", run(t, c, outputs...))

	run(t, c, "up", "--yes", "--stack", "dev")
	assert.Equal(t, "{}", run(t, c, outputs...))
	assert.Equal(t, "{}", run(t, c, "stack", "output", "--json", "--show-secrets", "--stack", "dev"))
	assert.Equal(t, "[]", run(t, c, history...))
	assert.Equal(t, "ran\n", run(t, c, outputs...), "the window closes with the history read")

	// A refresh is followed by the history read alone.
	run(t, c, "refresh", "--yes", "--stack", "dev")
	assert.Equal(t, "[]", run(t, c, history...))
	assert.Equal(t, "ran\n", run(t, c, history...))

	// A preview opens no window.
	run(t, c, "preview", "--stack", "dev")
	assert.Equal(t, "ran\n", run(t, c, outputs...))

	assert.Equal(t, []string{
		strings.Join(outputs, " "),
		"up --yes --stack dev",
		strings.Join(outputs, " "),
		"refresh --yes --stack dev",
		strings.Join(history, " "),
		"preview --stack dev",
		strings.Join(outputs, " "),
	}, ran())
}

// TestInProcessEngineMatchesCLI: previews run the engine linked into this
// program (pkg/v3 in go.mod), everything else the pinned CLI built from
// tools/pulumi/go.mod; both must be the same Pulumi release.
func TestInProcessEngineMatchesCLI(t *testing.T) {
	version := func(file string) string {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		m := cliPin.FindSubmatch(b)
		require.NotNil(t, m, "%s requires no github.com/pulumi/pulumi/pkg/v3", file)
		return string(m[1])
	}
	assert.Equal(t, version("../../tools/pulumi/go.mod"), version("../../go.mod"))
}
