package talosapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"testing"

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
