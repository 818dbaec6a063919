package stackfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordingLock is Milner's lock as a stack file's writer sees it: it
// records the file's bytes when it is taken and when it is released, so
// a test tells whether the write happened while it was held.
type recordingLock struct {
	path         string
	refuse       error
	taken, freed []byte
	takes, frees int
}

func (l *recordingLock) Lock(context.Context) (func(), error) {
	if l.refuse != nil {
		return nil, l.refuse
	}
	l.takes++
	l.taken, _ = os.ReadFile(l.path)
	return func() { l.frees++; l.freed, _ = os.ReadFile(l.path) }, nil
}

// copyStack copies a committed stack file into a temp dir.
func copyStack(t *testing.T, committed string) (string, []byte) {
	t.Helper()
	orig, err := os.ReadFile(committed)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), filepath.Base(committed))
	require.NoError(t, os.WriteFile(path, orig, 0o640))
	return path, orig
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestNodeFieldKeepsCommentsAndOtherNodes: an edit of milner:nodes[i]
// through Pulumi's ProjectStack (whose YAML edit matches list items by
// position) changes that node alone and keeps every comment; it is
// written under the lock, to a new file renamed over the old one, with
// the old one's mode.
func TestNodeFieldKeepsCommentsAndOtherNodes(t *testing.T) {
	path, orig := copyStack(t, "../../Pulumi.dev.yaml")
	before := inode(t, path)
	lock := &recordingLock{path: path}
	prev, err := Edit(t.Context(), lock, path, NodeField("cp-2", "adoptId", "0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69"))
	require.NoError(t, err)
	assert.Equal(t, orig, prev)
	assert.Equal(t, 1, lock.takes)
	assert.Equal(t, 1, lock.frees)
	assert.Equal(t, orig, lock.taken, "read under the lock")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, after, lock.freed, "written before the lock was released")
	assert.NotEqual(t, before, inode(t, path), "a new file renamed over the old one")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), ".*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary file left")

	// Exactly one line more, in cp-2's mapping; every other line as it was.
	assert.Equal(t, diffLines(string(orig), string(after)), []string{`+      adoptId: 0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69`})
	cp2 := strings.Index(string(after), "name: cp-2")
	cp3 := strings.Index(string(after), "name: cp-3")
	at := strings.Index(string(after), "adoptId:")
	assert.True(t, cp2 < at && at < cp3, "under cp-2")

	s, err := Read(path, nil)
	require.NoError(t, err)
	assert.Contains(t, s.Raw["milner:nodes"], `"adoptId":"0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69"`)

	// Setting it again replaces the value.
	_, err = Edit(t.Context(), lock, path, NodeField("cp-2", "adoptId", "11111111-2222-3333-4444-555555555555"))
	require.NoError(t, err)
	s, err = Read(path, nil)
	require.NoError(t, err)
	assert.Contains(t, s.Raw["milner:nodes"], `"adoptId":"11111111-2222-3333-4444-555555555555"`)
	assert.NotContains(t, s.Raw["milner:nodes"], "0f4a6c1e")
}

// TestNodeFieldKeepsCommentsInsideTheList: comments between and inside
// the items of milner:nodes stay with their item when one item changes,
// and a numeric Proxmox id stays a string.
func TestNodeFieldKeepsCommentsInsideTheList(t *testing.T) {
	const file = `# head
config:
  milner:nodes:
    # the first one
    - name: cp-1 # trailing
      role: controlplane
    # the second one
    - name: cp-2
      # its address
      address: 10.0.0.2
      role: controlplane
`
	path := filepath.Join(t.TempDir(), "Pulumi.c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(file), 0o644))
	_, err := Edit(t.Context(), &recordingLock{path: path}, path, NodeField("cp-2", "holderAdoptId", "1301"))
	require.NoError(t, err)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, []string{`+      holderAdoptId: "1301"`}, diffLines(file, string(after)))
}

// TestAdoptionAndBootstrapRecords: adopt --all's libvirt.adopt entries
// (keys quoted: a path segment in brackets) and the bootstrap flag (a boolean).
func TestAdoptionAndBootstrapRecords(t *testing.T) {
	path, _ := copyStack(t, "../../Pulumi.dev.yaml")
	lock := &recordingLock{path: path}
	_, err := Edit(t.Context(), lock, path, Adoption(map[string]string{"cp-1": "0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69"},
		map[string]string{"milner-dev-cp-1-os": "/var/lib/libvirt/images/milner-dev/milner-dev-cp-1-os.qcow2"}))
	require.NoError(t, err)
	_, err = Edit(t.Context(), lock, path, ClusterFlag("adoptBootstrap"))
	require.NoError(t, err)
	s, err := Read(path, nil)
	require.NoError(t, err)
	assert.Equal(t, "/var/lib/libvirt/images/milner-dev/milner-dev-cp-1-os.qcow2", s.Config.Substrate.Libvirt.Adopt["milner-dev-cp-1-os"])
	assert.True(t, s.Config.Cluster.AdoptBootstrap)
	assert.Equal(t, "0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69", s.Config.Nodes[0].AdoptID)
}

// TestSaltIsKept: the first run's salt is set once; one already written is
// kept.
func TestSaltIsKept(t *testing.T) {
	path, _ := copyStack(t, "../../Pulumi.dev.yaml")
	lock := &recordingLock{path: path}
	_, err := Edit(t.Context(), lock, path, Salt("v1:first"))
	require.NoError(t, err)
	_, err = Edit(t.Context(), lock, path, Salt("v1:second"))
	require.NoError(t, err)
	ps, err := Load("milner", path)
	require.NoError(t, err)
	assert.Equal(t, "v1:first", ps.EncryptionSalt)
	after, _ := os.ReadFile(path)
	assert.Contains(t, string(after), "# Secrets are never written here by hand", "comments survive")
}

// TestEditRefusedLeavesTheFile: an unknown node, or a lock another milner
// holds, writes nothing.
func TestEditRefusedLeavesTheFile(t *testing.T) {
	path, orig := copyStack(t, "../../Pulumi.dev.yaml")
	_, err := Edit(t.Context(), &recordingLock{path: path}, path, NodeField("cp-9", "adoptId", "x"))
	require.ErrorContains(t, err, `no node "cp-9" in milner:nodes (nodes: [cp-1 cp-2 cp-3])`)
	locked := errors.New("stack is locked by another milner operation")
	_, err = Edit(t.Context(), &recordingLock{path: path, refuse: locked}, path, NodeField("cp-1", "adoptId", "x"))
	require.ErrorIs(t, err, locked)
	err = Restore(t.Context(), &recordingLock{path: path, refuse: locked}, path, []byte("config: {}\n"))
	require.ErrorIs(t, err, locked)
	after, _ := os.ReadFile(path)
	assert.Equal(t, orig, after, "a refused edit leaves the file alone")
}

// diffLines is a line diff of a and b that assumes b only adds lines:
// the added ones, "+"-prefixed, or every line of b that differs.
func diffLines(a, b string) []string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	i := 0
	for _, l := range bl {
		if i < len(al) && al[i] == l {
			i++
			continue
		}
		out = append(out, "+"+l)
	}
	if i < len(al) {
		out = append(out, "-"+strings.Join(al[i:], "\n-"))
	}
	return out
}
