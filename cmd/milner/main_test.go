package main

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/pipeline"
)

// TestExitCodes: usage mistakes exit 2, help and version 0, refusals 3.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--help"}, pipeline.ExitOK},
		{[]string{"help"}, pipeline.ExitOK},
		{[]string{"up", "-h"}, pipeline.ExitOK},
		{[]string{"version"}, pipeline.ExitOK},
		{[]string{"completion", "bash"}, pipeline.ExitOK},
		{[]string{"nope"}, pipeline.ExitUsage},
		{[]string{"teardown"}, pipeline.ExitUsage}, // --stack is required
		{[]string{"preview", "--stack", "x", "--bogus"}, pipeline.ExitUsage},
		{[]string{"check"}, pipeline.ExitUsage},
		{[]string{"teardown", "--stack", "x", "cp-1"}, pipeline.ExitUsage}, // no partial teardown: a target is a usage error
		{[]string{"up", "--stack", "../prod"}, pipeline.ExitError},         // not a stack name
	} {
		assert.Equal(t, tc.want, run(tc.args), "%v", tc.args)
	}
}

// TestConfirmNeedsATerminal: a confirmation is never read from a pipe.
func TestConfirmNeedsATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	_, _ = w.WriteString("yes\n")
	require.NoError(t, w.Close())
	err = confirm(context.Background(), r, os.Stderr, "Apply?", "dev")
	var ref *refusal
	require.ErrorAs(t, err, &ref)
	assert.Contains(t, err.Error(), "--yes")
}

// TestConfirmNeverAnEmptyWord: a confirmation whose word is empty (a
// startAt: apps stack without milner:cluster.name asked for its cluster
// name) is refused before anything is read: a bare Enter would type it.
func TestConfirmNeverAnEmptyWord(t *testing.T) {
	// Any file does: the refusal comes before the terminal check.
	tty, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer func() { _ = tty.Close() }()
	for _, word := range []string{"", " "} {
		err := confirm(context.Background(), tty, os.Stderr, "Delete?", word)
		var ref *refusal
		require.ErrorAs(t, err, &ref, "%q", word)
		assert.Contains(t, err.Error(), "stack name")
	}
}

func TestCompletion(t *testing.T) {
	root := newRoot()
	require.NoError(t, root.PersistentFlags().Set("cwd", "../.."))
	stacks, _ := completeStacks(root, nil, "")
	assert.Contains(t, stacks, "dev")
	assert.Contains(t, stacks, "prod")
	up, _, err := root.Find([]string{"up"})
	require.NoError(t, err)
	require.NoError(t, up.Flags().Set("stack", "dev"))
	nodes, _ := completeNodes(up, nil, "")
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, nodes)
}
