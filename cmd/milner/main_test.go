package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		{[]string{"teardown"}, exitUsage}, // --stack is required
		{[]string{"preview", "--stack", "x", "--bogus"}, exitUsage},
		{[]string{"check"}, exitUsage},
		{[]string{"teardown", "--stack", "x", "cp-1"}, exitUsage}, // no partial teardown: a target is a usage error
		{[]string{"up", "--stack", "../prod"}, exitError},         // not a stack name
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

// TestKubeconfigMergeAndRemove: the stack's entries replace same-named ones,
// other clusters stay, and teardown's removal takes exactly the cluster's.
func TestKubeconfigMergeAndRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	other := "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster: {server: https://o}\ncontexts:\n- name: o@other\n  context: {cluster: other, user: o@other}\nusers:\n- name: o@other\n  user: {token: t}\ncurrent-context: o@other\n"
	require.NoError(t, os.WriteFile(path, []byte(other), 0o644))
	stack := "apiVersion: v1\nkind: Config\nclusters:\n- name: milner-dev\n  cluster: {server: https://10.73.0.240:6443}\ncontexts:\n- name: admin@milner-dev\n  context: {cluster: milner-dev, user: admin@milner-dev}\nusers:\n- name: admin@milner-dev\n  user: {client-key-data: aw==}\ncurrent-context: admin@milner-dev\n"

	_, err := kubeconfig.mergeInto(stack, path)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "credentials are 0600 even when the file existed wider")
	user, err := clientcmd.LoadFromFile(path)
	require.NoError(t, err)
	assert.Len(t, user.Clusters, 2)
	assert.Equal(t, "admin@milner-dev", user.CurrentContext)

	require.NoError(t, kubeconfig.removeFrom("milner-dev", path))
	user, err = clientcmd.LoadFromFile(path)
	require.NoError(t, err)
	assert.Equal(t, []string{"other"}, slices.Collect(maps.Keys(user.Clusters)))
	assert.Equal(t, []string{"o@other"}, slices.Collect(maps.Keys(user.AuthInfos)))
	assert.Equal(t, []string{"o@other"}, slices.Collect(maps.Keys(user.Contexts)))
	assert.Empty(t, user.CurrentContext)
	_, err = os.Stat(path + ".lock")
	assert.ErrorIs(t, err, os.ErrNotExist, "kubectl's lock file is released")

	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(path, link))
	_, err = kubeconfig.mergeInto(stack, link)
	assert.ErrorContains(t, err, "symlink")
}

// TestTalosconfigMergeAndRemove: the stack's context replaces a same-named
// one and becomes current; removal takes exactly the cluster's.
func TestTalosconfigMergeAndRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "talos", "config")
	_, err := talosconfig.mergeInto("context: other\ncontexts:\n  other:\n    endpoints: [10.0.0.1]\n", path)
	require.NoError(t, err)
	_, err = talosconfig.mergeInto("context: milner-dev\ncontexts:\n  milner-dev:\n    endpoints: [10.73.0.11]\n", path)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	user, err := clientconfig.Open(path)
	require.NoError(t, err)
	assert.Equal(t, "milner-dev", user.Context)
	assert.Len(t, user.Contexts, 2)

	require.NoError(t, talosconfig.removeFrom("milner-dev", path))
	user, err = clientconfig.Open(path)
	require.NoError(t, err)
	assert.Empty(t, user.Context)
	assert.Equal(t, []string{"other"}, slices.Collect(maps.Keys(user.Contexts)))
}
