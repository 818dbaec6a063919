package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestExitCodes: usage mistakes exit 2, help and version 0, refusals 3.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--help"}, exitOK},
		{[]string{"help"}, exitOK},
		{[]string{"up", "-h"}, exitOK},
		{[]string{"version"}, exitOK},
		{[]string{"completion", "bash"}, exitOK},
		{[]string{"nope"}, exitUsage},
		{[]string{"up"}, exitUsage}, // --stack is required
		{[]string{"preview", "--stack", "x", "--bogus"}, exitUsage},
		{[]string{"check"}, exitUsage},
		{[]string{"teardown", "--stack", "x", "cp-1"}, exitRefused}, // no partial teardown
		{[]string{"up", "--stack", "../prod"}, exitError},           // not a stack name
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
	err = confirm(r, os.Stderr, "Apply?", "yes", "--yes")
	var ref *refusal
	require.ErrorAs(t, err, &ref)
	assert.Contains(t, err.Error(), "--yes")
}

func TestCompletion(t *testing.T) {
	root := newRoot()
	require.NoError(t, root.PersistentFlags().Set("dir", "../.."))
	stacks, _ := completeStacks(root, nil, "")
	assert.Contains(t, stacks, "dev")
	assert.Contains(t, stacks, "prod")
	up, _, err := root.Find([]string{"up"})
	require.NoError(t, err)
	require.NoError(t, up.Flags().Set("stack", "dev"))
	nodes, _ := completeNodes(up, nil, "")
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, nodes)
}

// TestKubeconfigMergeAndRemove: the stack's entries replace same-named ones,
// other clusters stay, and teardown's removal takes exactly the cluster's.
func TestKubeconfigMergeAndRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	other := "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster: {server: https://o}\ncontexts:\n- name: o@other\n  context: {cluster: other, user: o@other}\nusers:\n- name: o@other\n  user: {token: t}\ncurrent-context: o@other\n"
	require.NoError(t, os.WriteFile(path, []byte(other), 0o644))
	stack := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte("apiVersion: v1\nkind: Config\nclusters:\n- name: milner-dev\n  cluster: {server: https://10.73.0.240:6443}\ncontexts:\n- name: admin@milner-dev\n  context: {cluster: milner-dev, user: admin@milner-dev}\nusers:\n- name: admin@milner-dev\n  user: {client-key-data: k}\ncurrent-context: admin@milner-dev\n"), &stack))

	user, err := readClientFile(path)
	require.NoError(t, err)
	kubeconfig.merge(user, stack)
	require.NoError(t, writeClientFile(path, user))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "credentials are 0600 even when the file existed wider")
	user, err = readClientFile(path)
	require.NoError(t, err)
	assert.Len(t, user["clusters"], 2)
	assert.Equal(t, "admin@milner-dev", user["current-context"])

	require.NoError(t, kubeconfig.removeFrom("milner-dev", path))
	user, err = readClientFile(path)
	require.NoError(t, err)
	assert.Len(t, user["clusters"], 1)
	assert.Len(t, user["users"], 1)
	assert.Len(t, user["contexts"], 1)
	assert.Nil(t, user["current-context"])

	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(path, link))
	_, err = readClientFile(link)
	assert.ErrorContains(t, err, "symlink")
}

// TestGuardRefusesUnreadableSubstrate: a substrate config the guard cannot
// decode is refused, never a skipped guard; a stack without one (an
// existing cluster) has nothing to guard.
func TestGuardRefusesUnreadableSubstrate(t *testing.T) {
	var r *refusal
	err := guardSubstrate(t.Context(), nil, map[string]string{"milner:substrate": `{"kind": 3}`})
	require.ErrorAs(t, err, &r)
	assert.Contains(t, err.Error(), "milner:substrate")
	require.NoError(t, guardSubstrate(t.Context(), nil, map[string]string{}))
}
