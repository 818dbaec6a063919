package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrEtcdHasQuorum is wrapped by EtcdRestore's refusal: a control plane
// still lists etcd's members, so etcd has a leader, and a recover would
// bootstrap a second cluster beside it.
var ErrEtcdHasQuorum = errors.New("etcd still has quorum")

// restoreWait bounds the wait for the recovered member's status.
const restoreWait = 5 * time.Minute

// EtcdRestore is Talos' disaster recovery (talos v1.9.5
// internal/integration/api/etcd-recover.go, EtcdRecoverSuite.recoverEtcd:
// EtcdRecover uploads the snapshot, then Bootstrap with RecoverEtcd, each
// retried while it answers FailedPrecondition), on node, a declared control
// plane. It refuses, asking nothing else, while any control plane lists
// the etcd members (ErrEtcdHasQuorum): machined answers EtcdMemberList
// through the control planes' etcd, which needs a leader. After confirm
// (its error ends the run, nothing changed), the upload and the
// Bootstrap; then it waits
// until node's own member answers its status without errors.
func (c *Cluster) EtcdRestore(ctx context.Context, node string, snapshot io.ReadSeeker, out io.Writer, confirm func() error) error {
	cps := c.declared.controlPlanes()
	if !slices.ContainsFunc(cps, func(n Node) bool { return n.Name == node }) {
		return fmt.Errorf("--node %s is not a control plane of milner:nodes", node)
	}
	for _, n := range cps {
		if ms, err := c.members(ctx, n); err == nil {
			return fmt.Errorf("%w: %s lists %d etcd members; a recover would start a second etcd cluster; nothing was changed", ErrEtcdHasQuorum, n.Name, len(ms))
		}
	}
	if err := confirm(); err != nil {
		return err
	}
	cl := c.clients[node]
	_, _ = fmt.Fprintf(out, "milner etcd: uploading the snapshot to %s (EtcdRecover)\n", node)
	if err := retryPrecondition(ctx, func(ctx context.Context) error {
		if _, err := snapshot.Seek(0, io.SeekStart); err != nil {
			return err
		}
		_, err := cl.EtcdRecover(ctx, snapshot)
		return err
	}); err != nil {
		return fmt.Errorf("%s: etcd recover: %w", node, err)
	}
	_, _ = fmt.Fprintf(out, "milner etcd: bootstrapping etcd on %s from it (Bootstrap, recover_etcd)\n", node)
	if err := retryPrecondition(ctx, func(ctx context.Context) error {
		return cl.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true})
	}); err != nil {
		return fmt.Errorf("%s: bootstrap from the snapshot: %w", node, err)
	}
	n := cps[slices.IndexFunc(cps, func(n Node) bool { return n.Name == node })]
	wctx, cancel := context.WithTimeout(ctx, restoreWait)
	defer cancel()
	for {
		_, err := c.etcdStatus(wctx, n)
		if err == nil {
			_, _ = fmt.Fprintf(out, "milner etcd: %s runs etcd from the snapshot; the other control planes rejoin once their etcd data is empty\n", node)
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s: etcd did not come up from the snapshot within %s (talosctl -n %s service etcd): %w", node, restoreWait, node, err)
		case <-time.After(time.Second):
		}
	}
}

// retryPrecondition calls f until it answers other than FailedPrecondition
// (the service not ready yet), for at most a minute, as Talos' own
// recovery test does.
func retryPrecondition(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		err := f(ctx)
		if status.Code(err) != codes.FailedPrecondition {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
