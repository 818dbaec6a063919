package clientfiles

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
)

// TestKubeconfigMergeAndRemove: the stack's entries replace same-named ones,
// other clusters stay, and teardown's removal takes exactly the cluster's.
func TestKubeconfigMergeAndRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	other := "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster: {server: https://o}\ncontexts:\n- name: o@other\n  context: {cluster: other, user: o@other}\nusers:\n- name: o@other\n  user: {token: t}\ncurrent-context: o@other\n"
	require.NoError(t, os.WriteFile(path, []byte(other), 0o644))
	stack := "apiVersion: v1\nkind: Config\nclusters:\n- name: milner-dev\n  cluster: {server: https://10.73.0.240:6443}\ncontexts:\n- name: admin@milner-dev\n  context: {cluster: milner-dev, user: admin@milner-dev}\nusers:\n- name: admin@milner-dev\n  user: {client-key-data: aw==}\ncurrent-context: admin@milner-dev\n"

	_, _, err := Kube.MergeInto(stack, path, false)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "credentials are 0600 even when the file existed wider")
	user, err := clientcmd.LoadFromFile(path)
	require.NoError(t, err)
	assert.Len(t, user.Clusters, 2)
	assert.Equal(t, "admin@milner-dev", user.CurrentContext)

	require.NoError(t, Kube.RemoveFrom("milner-dev", path))
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
	_, _, err = Kube.MergeInto(stack, link, false)
	assert.ErrorContains(t, err, "symlink")
}

// TestTalosconfigMergeAndRemove: the stack's context replaces a same-named
// one and becomes current; removal takes exactly the cluster's.
func TestTalosconfigMergeAndRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "talos", "config")
	_, _, err := Talos.MergeInto("context: other\ncontexts:\n  other:\n    endpoints: [10.0.0.1]\n", path, false)
	require.NoError(t, err)
	_, _, err = Talos.MergeInto("context: milner-dev\ncontexts:\n  milner-dev:\n    endpoints: [10.73.0.11]\n", path, false)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	user, err := clientconfig.Open(path)
	require.NoError(t, err)
	assert.Equal(t, "milner-dev", user.Context)
	assert.Len(t, user.Contexts, 2)

	require.NoError(t, Talos.RemoveFrom("milner-dev", path))
	user, err = clientconfig.Open(path)
	require.NoError(t, err)
	assert.Empty(t, user.Context)
	assert.Equal(t, []string{"other"}, slices.Collect(maps.Keys(user.Contexts)))
}
