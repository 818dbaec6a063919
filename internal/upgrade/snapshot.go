package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// ErrNoHealthyEtcd is wrapped by EtcdSnapshot when no control plane's etcd
// answers its status without errors: nothing was read.
var ErrNoHealthyEtcd = errors.New("no control plane has a healthy etcd member")

// Snapshot is an etcd snapshot stream from one control plane.
type Snapshot struct {
	// Node is the control plane it streams from.
	Node string
	// Skipped says why each control plane asked before Node was not used.
	Skipped []string
	io.ReadCloser
}

// EtcdSnapshot streams an etcd snapshot from the first control plane, in
// config order, whose own etcd member answers EtcdStatus without errors,
// as `talosctl etcd snapshot` does against one node (talos v1.13.9
// cmd/talosctl/cmd/talos/etcd.go, etcdSnapshotCmd: MachineService
// EtcdSnapshot, read to EOF). machined answers it from its local member
// (v1alpha1_server.go, Server.EtcdSnapshot: etcd.NewLocalClient, then
// clientv3 Maintenance.Snapshot in 1 KiB chunks), so a member that cannot
// report its status would stream nothing useful: it is skipped. The
// stream is etcd's own: the bbolt database and its sha256 trailer; the
// caller verifies it.
func (c *Cluster) EtcdSnapshot(ctx context.Context) (*Snapshot, error) {
	s := &Snapshot{}
	for _, n := range c.declared.controlPlanes() {
		if _, err := c.etcdStatus(ctx, n); err != nil {
			s.Skipped = append(s.Skipped, fmt.Sprintf("%s: etcd %v", n.Name, err))
			continue
		}
		r, err := c.clients[n.Name].EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
		if err != nil {
			s.Skipped = append(s.Skipped, fmt.Sprintf("%s: etcd snapshot: %v", n.Name, err))
			continue
		}
		s.Node, s.ReadCloser = n.Name, r
		return s, nil
	}
	if len(s.Skipped) == 0 {
		return nil, fmt.Errorf("%w: the stack declares no control plane (milner:nodes)", ErrNoHealthyEtcd)
	}
	return nil, fmt.Errorf("%w (%v); nothing was written", ErrNoHealthyEtcd, s.Skipped)
}
