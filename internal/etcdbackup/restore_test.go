package etcdbackup_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/tests/etcdtest"
)

// A restore is refused while a control plane lists etcd's members, before
// the confirmation and before any call that changes a node.
func TestRestoreRefusedWhileEtcdHasQuorum(t *testing.T) {
	e := etcdtest.Start(t)
	clear := loaded(t, e)
	d, uc := cluster(t, e.Snapshot, cpNode("cp-1"), cpNode("cp-2"), cpNode("cp-3"))
	d.Nodes()[0].SetEtcdRunning(false) // one member down: two of three keep quorum

	asked := 0
	err := uc.EtcdRestore(ctx(t), "cp-1", clear.Reader(), io.Discard, func() error { asked++; return nil })
	require.ErrorIs(t, err, upgrade.ErrEtcdHasQuorum)
	assert.Zero(t, asked, "refused before the confirmation")
	assert.Empty(t, d.Journal().Calls("EtcdRecover"))
	assert.Empty(t, d.Journal().Calls("Bootstrap"))

	err = uc.EtcdRestore(ctx(t), "w-9", clear.Reader(), io.Discard, func() error { return nil })
	assert.ErrorContains(t, err, "--node w-9 is not a control plane")
}

// With every control plane's etcd lost, the snapshot is uploaded to the
// node and bootstrapped from: etcd runs at the snapshot's revision and
// the other control plane rejoins.
func TestRestoreAfterEtcdIsLost(t *testing.T) {
	e := etcdtest.Start(t)
	rev, err := e.Put(ctx(t), "/registry/secrets/default/s", 12)
	require.NoError(t, err)
	clear := loaded(t, e)
	d, uc := clusterOf(t, e.Snapshot, false, cpNode("cp-1"), cpNode("cp-2"), wNode("w-1"))

	var out bytes.Buffer
	asked := 0
	require.NoError(t, uc.EtcdRestore(ctx(t), "cp-1", clear.Reader(), &out, func() error { asked++; return nil }))
	assert.Equal(t, 1, asked)
	assert.Equal(t, rev, d.EtcdRecoveredRevision())
	assert.Len(t, d.Journal().Calls("EtcdRecover"), 1)
	boots := d.Journal().Calls("Bootstrap")
	require.Len(t, boots, 1)
	assert.Equal(t, "cp-1", boots[0].Node)
	assert.Contains(t, d.EtcdMembers(), "cp-1")
	assert.Contains(t, d.EtcdMembers(), "cp-2", "an empty control plane rejoins")
	assert.Contains(t, out.String(), "cp-1 runs etcd from the snapshot")
}
