package upgrade

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Removing a node (`milner up --remove <node>`, docs/runbooks/remove-node.md)
// takes it out of the running cluster before the engine deletes its VM, in
// the order of Talos' own graceful reset (talos v1.13.9 internal/app/
// machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go, Sequencer.Reset:
// "drain", "cleanup", "leave" (its etcd member), then every service
// stopped), with a Shutdown where the reset would wipe the disks: Milner
// never resets a node, and the node's volumes are kept.
//
//  1. cordon and drain its Kubernetes node (Drain: PodDisruptionBudgets
//     hold; a refused eviction stops the removal, naming the pod, before
//     anything else is touched);
//  2. for a control plane, remove its etcd member through another control
//     plane (MemberRemovalFor refused the removal earlier if quorum would
//     be lost);
//  3. Talos Shutdown (never Reset), and the wait for its VM to stop;
//  4. delete its Kubernetes Node: its kubelet is gone, and Talos' health
//     check would count a NotReady node that no config declares (talos
//     pkg/cluster/check K8sAllNodesReportedAssertion compares the nodes
//     Kubernetes lists with the cluster's);
//
// then the engine deletes its VM and Talos config apply and drops its
// retained volumes from state (internal/pipeline remove.go).

// NodeRemoval is what removing one node takes.
type NodeRemoval struct {
	// Node is the removed node, as the state recorded it (it is no longer
	// declared).
	Node Node
	// Member is its etcd member's removal; nil for a worker.
	Member *MemberRemoval
}

// RemovalFor decides a node's removal: a control plane's etcd side is
// MemberRemovalFor's (refused, ErrUnsafeMemberRemoval, when quorum would
// be lost or the node is the last control plane).
func (c *Cluster) RemovalFor(ctx context.Context, n Node) (*NodeRemoval, error) {
	r := &NodeRemoval{Node: n}
	var err error
	r.Member, err = c.MemberRemovalFor(ctx, n.Name)
	return r, err
}

// RemoveNode runs steps 1-4 above. The drain's failure stops it with
// nothing else touched (the node stays cordoned: the error says how to
// undo that); a node that does not answer the Talos API is reported and
// treated as dead (its VM is powered off by the provider's delete).
func (c *Cluster) RemoveNode(ctx context.Context, r *NodeRemoval, kube kubernetes.Interface, stopped StoppedFunc, stopTimeout time.Duration, o Options) error {
	name := r.Node.Name
	if err := Drain(ctx, kube, name, o.DrainTimeout, o.Out); err != nil {
		return fmt.Errorf("node %q: %w; nothing else was changed: the node is cordoned (`kubectl uncordon %s` undoes it); fix the cause and rerun", name, err, name)
	}
	if err := c.Remove(ctx, r.Member, o.Out); err != nil {
		return err
	}
	answered, err := c.shutdown(ctx, name, stopped, stopTimeout, o)
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	switch {
	case err == nil:
		_, _ = fmt.Fprintf(o.Out, "milner up: %s: its VM has stopped\n", name)
	case answered:
		_, _ = fmt.Fprintf(o.Out, "milner up: %s: its VM did not stop within %s (%v); the provider powers it off\n", name, stopTimeout, err)
	default:
		_, _ = fmt.Fprintf(o.Out, "milner up: %s: did not answer the Talos API (%v); treated as dead\n", name, err)
	}
	err = kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("node %q: delete its Kubernetes node: %w; it is drained and shut down: rerun to finish", name, err)
	default:
		_, _ = fmt.Fprintf(o.Out, "milner up: %s: Kubernetes node deleted\n", name)
	}
	return nil
}
