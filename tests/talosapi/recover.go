package talosapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/milner/milner/internal/etcdbackup"
)

// EtcdRecover is Server.EtcdRecover (talos v1.9.5 and v1.13.9
// v1alpha1_server.go): FailedPrecondition "etcd service is not ready for
// recovery yet" until the node has a config (the directory of
// constants.EtcdRecoverySnapshotPath, /var/lib, is on EPHEMERAL), refused
// on a worker (checkControlplane), then the uploaded bytes are kept, as
// they came, for a Bootstrap with RecoverEtcd; a broken upload keeps
// nothing.
func (m *machined) EtcdRecover(srv machine.MachineService_EtcdRecoverServer) error {
	n := m.n
	n.c.mu.Lock()
	err := error(nil)
	switch {
	case !n.booted || n.active == nil:
		err = status.Error(codes.FailedPrecondition, "etcd service is not ready for recovery yet")
	default:
		err = n.checkControlplaneLocked("etcd recover")
	}
	n.c.mu.Unlock()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	for {
		msg, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		buf.Write(msg.GetBytes())
	}
	n.c.mu.Lock()
	n.recovery = buf.Bytes()
	n.c.mu.Unlock()
	return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{}}})
}

// RecoverSink takes a snapshot a Bootstrap with RecoverEtcd restores: the
// double models etcd's membership, not its data, so a test whose etcd
// holds the cluster's data (tests/clusterapi) restores it there.
type RecoverSink func(snapshot []byte) error

// SetEtcdRecoverSink sets where a recovered snapshot's data goes (with
// none, the recover restores membership only).
func (c *Cluster) SetEtcdRecoverSink(sink RecoverSink) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.etcd.recoverSink = sink
}

// recoverLocked is the etcd service started by a Bootstrap with
// RecoverEtcd (talos v1.9.5 internal/app/machined/pkg/system/services/
// etcd.go, argsForInit and recoverFromSnapshot): the call has already
// answered; the service verifies the uploaded snapshot with etcdutl's
// Status and restores it with etcdutl's Restore, which checks its sha256
// (RecoverSkipHashCheck is not modelled), into a new one-member cluster
// (InitialCluster: this node alone); the other control planes with empty
// data directories join it. Without a snapshot, or with one that fails
// its checks, the etcd service fails and nothing is bootstrapped; the node
// keeps failing (its service retries the recovery) and never joins. With
// a RecoverSink the restore runs there, after the call's answer (the
// service's pre-start, before etcd runs), and the member starts once it
// is done.
func (n *Node) recoverLocked() {
	snap := n.recovery
	n.recovery = nil // removed once restored (recoverFromSnapshot)
	if snap == nil {
		n.etcdFailed = "error verifying snapshot: stat /var/lib/etcd.snapshot: no such file or directory"
		return
	}
	c, err := etcdbackup.Load(bytes.NewReader(snap))
	if err != nil {
		n.etcdFailed = fmt.Sprintf("error recovering from the snapshot: %v", err)
		return
	}
	rev := c.Status.Revision
	_ = c.Close()
	n.etcdData = true // restored into its data directory
	sink := n.c.etcd.recoverSink
	if sink == nil {
		n.startRecoveredLocked(rev)
		return
	}
	go func() {
		err := sink(snap)
		n.c.mu.Lock()
		defer n.c.mu.Unlock()
		if err != nil {
			n.etcdFailed = fmt.Sprintf("error recovering from the snapshot: %v", err)
			return
		}
		n.startRecoveredLocked(rev)
	}()
}

// startRecoveredLocked starts the recovered member: the cluster is this
// member alone, the other control planes' old members are not in it (they
// rejoin with empty data directories only).
func (n *Node) startRecoveredLocked(rev int64) {
	n.c.etcd.recoveredRevision = rev
	n.etcdFailed = ""
	n.c.etcd.members = nil
	for _, o := range n.c.nodes {
		if o != n && o.member != nil {
			o.member = nil
		}
	}
	n.c.bootstrapLocked(n)
}

// EtcdRecoveredRevision is the etcd revision of the snapshot the cluster
// was last recovered from (Bootstrap with RecoverEtcd), 0 if none.
func (c *Cluster) EtcdRecoveredRevision() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.etcd.recoveredRevision
}
