package talosapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/milner/milner/tests/etcdtest"
	"github.com/milner/milner/tests/talosapi"
)

// snapshot reads a node's EtcdSnapshot stream to its end, as talosctl
// etcd snapshot does.
func snapshot(c context.Context, e *env, n *talosapi.Node) ([]byte, error) {
	r, err := e.client(n).EtcdSnapshot(c, &machine.EtcdSnapshotRequest{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	return io.ReadAll(r)
}

// EtcdSnapshot answers as machined's Server.EtcdSnapshot: a worker is
// refused (checkControlplane), a control plane whose etcd is not running
// fails reading from its local member, and a running one streams etcd's
// snapshot (the database and its sha256).
func TestEtcdSnapshot(t *testing.T) {
	e := newEnv(t)
	et := etcdtest.Start(t)
	c := ctx(t)
	_, err := et.Put(c, "/registry/x", 3)
	require.NoError(t, err)
	e.c.SetEtcdSnapshotSource(et.Snapshot)
	cp1 := e.configured("cp-1", 1, e.cp)
	cp2 := e.configured("cp-2", 2, e.cp)
	w1 := e.configured("w-1", 3, e.w)
	require.NoError(t, cp1.BootstrapEtcd())

	_, err = snapshot(c, e, w1)
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.ErrorContains(t, err, "etcd snapshot is only available on control plane nodes")

	cp2.SetEtcdRunning(false)
	_, err = snapshot(c, e, cp2)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.ErrorContains(t, err, "failed reading etcd snapshot: ")

	got, err := snapshot(c, e, cp1)
	require.NoError(t, err)
	assert.Greater(t, len(got), 1024, "more than one chunk")
	require.Equal(t, sha256.Size, len(got)%512, "etcd's database and its sha256 trailer")
	db := sha256.Sum256(got[:len(got)-sha256.Size])
	assert.True(t, bytes.Equal(db[:], got[len(got)-sha256.Size:]), "the trailer is the database's sha256")
	assert.Len(t, e.c.Journal().Calls("EtcdSnapshot"), 3)
}

// etcdService is the etcd service's state and last message on n.
func etcdService(t *testing.T, c context.Context, e *env, n *talosapi.Node) (string, string) {
	t.Helper()
	resp, err := e.client(n).ServiceList(c)
	require.NoError(t, err)
	for _, s := range resp.GetMessages()[0].GetServices() {
		if s.GetId() == "etcd" {
			evs := s.GetEvents().GetEvents()
			return s.GetState(), evs[len(evs)-1].GetMsg()
		}
	}
	t.Fatalf("%s runs no etcd service", n.Name())
	return "", ""
}

// realSnapshot is a snapshot of a real etcd holding one key, and its
// revision.
func realSnapshot(t *testing.T, c context.Context) ([]byte, int64) {
	t.Helper()
	et := etcdtest.Start(t)
	rev, err := et.Put(c, "/registry/x", 7)
	require.NoError(t, err)
	r, err := et.Snapshot(c)
	require.NoError(t, err)
	snap, err := io.ReadAll(r)
	require.NoError(t, err)
	return snap, rev
}

// EtcdRecover and Bootstrap{RecoverEtcd} answer as machined does: the
// upload refused on a worker; the Bootstrap answered at once, its etcd
// service failing without a snapshot or with one whose sha256 does not
// match; with a real etcd's snapshot a new cluster of that member, at the
// snapshot's revision, which a control plane with empty data joins.
func TestEtcdRecover(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	snap, rev := realSnapshot(t, c)
	cp1 := e.configured("cp-1", 1, e.cp)
	cp2 := e.configured("cp-2", 2, e.cp)
	w1 := e.configured("w-1", 3, e.w)

	_, err := e.client(w1).EtcdRecover(c, bytes.NewReader(snap))
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.ErrorContains(t, err, "etcd recover is only available on control plane nodes")

	require.NoError(t, e.client(cp2).Bootstrap(c, &machine.BootstrapRequest{RecoverEtcd: true}), "answered before the service starts")
	state, msg := etcdService(t, c, e, cp2)
	assert.Equal(t, "Failed", state)
	assert.Contains(t, msg, "error verifying snapshot")

	bad := bytes.Clone(snap)
	bad[len(bad)-1] ^= 0xff
	_, err = e.client(cp1).EtcdRecover(c, bytes.NewReader(bad))
	require.NoError(t, err)
	require.NoError(t, e.client(cp1).Bootstrap(c, &machine.BootstrapRequest{RecoverEtcd: true}))
	state, msg = etcdService(t, c, e, cp1)
	assert.Equal(t, "Failed", state)
	assert.Contains(t, msg, "error recovering from the snapshot")
	assert.Empty(t, e.c.EtcdMembers())

	_, err = e.client(cp1).EtcdRecover(c, bytes.NewReader(snap))
	require.NoError(t, err)
	require.NoError(t, e.client(cp1).Bootstrap(c, &machine.BootstrapRequest{RecoverEtcd: true}))
	state, _ = etcdService(t, c, e, cp1)
	assert.Equal(t, "Running", state)
	assert.Equal(t, rev, e.c.EtcdRecoveredRevision())
	e.configured("cp-3", 4, e.cp)
	waitFor(t, "cp-3 to join the recovered cluster", func() bool { return len(e.c.EtcdMembers()) == 2 })
	assert.NotContains(t, e.c.EtcdMembers(), "cp-2", "its etcd keeps retrying the failed recovery")

	err = e.client(cp1).Bootstrap(c, &machine.BootstrapRequest{RecoverEtcd: true})
	assert.Equal(t, codes.AlreadyExists, status.Code(err))
}

// Talos' disaster recovery: etcd fails on every control plane; each one's
// EPHEMERAL wiped (reset with system_partitions_to_wipe) reboots it with
// its config and no etcd data; with no member left to lead, none rejoins
// (the join goes through the running members) until a Bootstrap with
// RecoverEtcd on one of them, whose restore runs in the RecoverSink before
// its member starts; the others then rejoin it.
func TestResetEphemeralThenRecover(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	snap, rev := realSnapshot(t, c)
	cps := []*talosapi.Node{e.configured("cp-1", 1, e.cp), e.configured("cp-2", 2, e.cp), e.configured("cp-3", 3, e.cp)}
	require.NoError(t, cps[0].BootstrapEtcd())
	waitFor(t, "three members", func() bool { return len(e.c.EtcdMembers()) == 3 })

	wipe := func(label string) *machine.ResetRequest {
		return &machine.ResetRequest{Reboot: true, SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: label, Wipe: true}}}
	}
	_, err := e.client(cps[0]).MachineClient.Reset(c, wipe("BOOT"))
	require.ErrorContains(t, err, `failed to get volume status with label "BOOT"`)
	for _, n := range cps {
		n.SetEtcdRunning(false)
	}
	for _, n := range cps {
		_, err := e.client(n).MachineClient.Reset(c, wipe("EPHEMERAL"))
		require.NoError(t, err)
	}
	for _, n := range cps {
		waitFor(t, n.Name()+" to reboot", func() bool { return len(n.Journal().Events("reset")) == 1 && n.Status().Booted })
		assert.NotEmpty(t, n.Config(), "%s keeps its config (STATE)", n.Name())
	}
	time.Sleep(100 * time.Millisecond)
	for _, n := range cps {
		assert.Zero(t, n.Status().EtcdMemberID, "%s joined a cluster with no leader", n.Name())
	}
	_, err = e.client(cps[1]).EtcdMemberList(c, &machine.EtcdMemberListRequest{})
	require.Error(t, err, "no leader")

	restored, release := make(chan []byte, 1), make(chan struct{})
	e.c.SetEtcdRecoverSink(func(b []byte) error { restored <- b; <-release; return nil })
	_, err = e.client(cps[0]).EtcdRecover(c, bytes.NewReader(snap))
	require.NoError(t, err)
	require.NoError(t, e.client(cps[0]).Bootstrap(c, &machine.BootstrapRequest{RecoverEtcd: true}))
	assert.Equal(t, snap, <-restored, "the sink restores the uploaded snapshot")
	assert.Zero(t, cps[0].Status().EtcdMemberID, "the member started before its restore ended")
	close(release)
	waitFor(t, "the others to rejoin the recovered member", func() bool {
		for _, n := range cps {
			if n.Status().EtcdMemberID == 0 {
				return false
			}
		}
		return len(e.c.EtcdMembers()) == 3
	})
	assert.Equal(t, rev, e.c.EtcdRecoveredRevision())
}
