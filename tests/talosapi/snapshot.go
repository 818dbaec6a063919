package talosapi

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// SnapshotSource streams a snapshot of the cluster's etcd as etcd's
// Maintenance.Snapshot does: the bbolt database, then its sha256.
type SnapshotSource func(ctx context.Context) (io.ReadCloser, error)

// snapshotChunk is the size of each message EtcdSnapshot sends: Talos'
// stream.NewChunker default (talos v1.13.9 pkg/chunker/stream/stream.go,
// Options.Size 1024).
const snapshotChunk = 1024

// SetEtcdSnapshotSource sets where EtcdSnapshot's bytes come from: the
// double models etcd's membership, not its data, so a test hands it a
// real etcd's snapshot stream (tests/etcdtest in process, or the
// scenario's etcd through tests/clusterapi). Every member answers with the
// same data, as a replicated etcd would.
func (c *Cluster) SetEtcdSnapshotSource(src SnapshotSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.etcd.snapshots = src
}

// EtcdSnapshot is Server.EtcdSnapshot (talos v1.13.9
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go; the
// same in v1.9.5): refused on a worker (checkControlplane, Unimplemented);
// then a client of the node's own etcd (etcd.NewLocalClient, which dials
// lazily) whose Maintenance.Snapshot fails while the local member is not
// running ("failed reading etcd snapshot: ..."); then the stream, sent in
// chunks of 1 KiB as common.Data. An error of the source mid-stream ends
// the call with it, as a broken etcd stream does.
func (m *machined) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, srv machine.MachineService_EtcdSnapshotServer) error {
	n := m.n
	n.c.mu.Lock()
	err := n.checkControlplaneLocked("etcd snapshot")
	if err == nil {
		if lerr := n.localEtcdLocked(); lerr != nil {
			err = fmt.Errorf("failed reading etcd snapshot: %w", lerr)
		}
	}
	src := n.c.etcd.snapshots
	n.c.mu.Unlock()
	if err != nil {
		return err
	}
	if src == nil {
		return errors.New("failed reading etcd snapshot: the test set no snapshot source (Cluster.SetEtcdSnapshotSource)")
	}
	rd, err := src(srv.Context())
	if err != nil {
		return fmt.Errorf("failed reading etcd snapshot: %w", err)
	}
	defer func() { _ = rd.Close() }()
	buf := make([]byte, snapshotChunk)
	for {
		k, rerr := io.ReadFull(rd, buf)
		if k > 0 {
			if err := srv.Send(&common.Data{Bytes: append([]byte(nil), buf[:k]...)}); err != nil {
				return err
			}
		}
		switch {
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return nil
		case rerr != nil:
			return rerr
		}
	}
}
