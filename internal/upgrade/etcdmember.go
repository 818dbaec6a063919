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

// A control plane whose OS disk is lost comes back empty: its etcd data
// (on EPHEMERAL, on the OS disk) is gone, so its old member must leave the
// cluster before the fresh node joins, as Talos' documented procedure does
// with `talosctl etcd remove-member` (machined Server.EtcdRemoveMemberByID:
// a MemberRemove through an etcd client of every control plane, with
// WithRequireLeader; NotFound when the id is not a member). The member's
// name is the node's hostname, which the substrate sets to the node's name.

// ErrUnsafeMemberRemoval is wrapped by MemberRemovalFor's refusals: the
// last control plane, or a removal after which etcd would lack quorum.
var ErrUnsafeMemberRemoval = errors.New("removing the etcd member is unsafe")

// memberCallTimeout bounds each etcd call through a node.
const memberCallTimeout = 15 * time.Second

// MemberRemoval is the etcd member a lost OS disk leaves behind.
type MemberRemoval struct {
	// Node is the node whose OS disk is replaced.
	Node string
	// Via is the control plane the member is removed through.
	Via string
	// MemberID is the member to remove; 0 when the node has none (already
	// removed, or a worker).
	MemberID uint64
	// Voters is the number of voting members before the removal.
	Voters int
	// Healthy are the other control planes whose etcd answers without errors.
	Healthy []string
}

// MemberRemovalFor decides the etcd side of replacing node's OS disk. A
// worker has no member (nil, nil). For a control plane it asks the other
// control planes, and refuses (ErrUnsafeMemberRemoval) when node is the
// last control plane, when no other one can list the members, or when the
// healthy other members would not make a quorum of the members left.
func (c *Cluster) MemberRemovalFor(ctx context.Context, node string) (*MemberRemoval, error) {
	cps := c.declared.controlPlanes()
	others := slices.DeleteFunc(slices.Clone(cps), func(n Node) bool { return n.Name == node })
	if len(others) == len(cps) {
		return nil, nil // a worker: no etcd member
	}
	if len(others) == 0 {
		return nil, fmt.Errorf("%w: %s is the last control plane: with its OS disk the cluster's only etcd data is lost; restore etcd from a snapshot instead (`milner etcd restore`, docs/runbooks/backup.md)", ErrUnsafeMemberRemoval, node)
	}
	r := &MemberRemoval{Node: node}
	var members []*machine.EtcdMember
	var listErrs []error
	for _, o := range others {
		ms, err := c.members(ctx, o)
		if err != nil {
			listErrs = append(listErrs, fmt.Errorf("%s: %w", o.Name, err))
			continue
		}
		if r.Via == "" {
			r.Via, members = o.Name, ms
		}
		if _, err := c.etcdStatus(ctx, o); err == nil {
			r.Healthy = append(r.Healthy, o.Name)
		}
	}
	if r.Via == "" {
		return nil, fmt.Errorf("%w: no other control plane lists the etcd members (%w): etcd has no quorum; nothing was changed", ErrUnsafeMemberRemoval, errors.Join(listErrs...))
	}
	for _, m := range members {
		if !m.GetIsLearner() {
			r.Voters++
		}
		if m.GetHostname() == node {
			r.MemberID = m.GetId()
		}
	}
	left := r.Voters
	if r.MemberID != 0 {
		left--
	}
	if left == 0 {
		return nil, fmt.Errorf("%w: %s is etcd's last member", ErrUnsafeMemberRemoval, node)
	}
	if quorum := left/2 + 1; len(r.Healthy) < quorum {
		return nil, fmt.Errorf("%w: after removing %s, %d etcd members are left and need %d healthy for quorum, but only %d are healthy (%v); bring the others back first",
			ErrUnsafeMemberRemoval, node, left, quorum, len(r.Healthy), r.Healthy)
	}
	return r, nil
}

// members lists the etcd members through node n.
func (c *Cluster) members(ctx context.Context, n Node) ([]*machine.EtcdMember, error) {
	ctx, cancel := context.WithTimeout(ctx, memberCallTimeout)
	defer cancel()
	resp, err := c.clients[n.Name].EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err != nil {
		return nil, err
	}
	if len(resp.GetMessages()) != 1 {
		return nil, fmt.Errorf("etcd member list: want one answer, got %d", len(resp.GetMessages()))
	}
	return resp.GetMessages()[0].GetMembers(), nil
}

// Remove removes the member through Via. A member already gone (NotFound,
// e.g. a rerun after a failed apply) is not an error.
func (c *Cluster) Remove(ctx context.Context, r *MemberRemoval, out io.Writer) error {
	if r == nil || r.MemberID == 0 {
		if r != nil {
			_, _ = fmt.Fprintf(out, "milner up: %s: no etcd member to remove (already removed)\n", r.Node)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, memberCallTimeout)
	defer cancel()
	err := c.clients[r.Via].EtcdRemoveMemberByID(ctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: r.MemberID})
	if status.Code(err) == codes.NotFound {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("node %q: remove etcd member %x through %s: %w; nothing was applied", r.Node, r.MemberID, r.Via, err)
	}
	_, _ = fmt.Fprintf(out, "milner up: %s: etcd member %x removed through %s\n", r.Node, r.MemberID, r.Via)
	return nil
}

// WaitRejoined waits, up to timeout, until the node is a voting etcd
// member again under a new id (Talos joins a fresh control plane as a
// learner and promotes it).
func (c *Cluster) WaitRejoined(ctx context.Context, r *MemberRemoval, timeout time.Duration, o Options) error {
	if r == nil {
		return nil
	}
	_, _ = fmt.Fprintf(o.Out, "milner up: %s: waiting up to %s for it to rejoin etcd\n", r.Node, timeout)
	err := c.waitVoter(ctx, r.Via, r.Node, r.MemberID, timeout, o)
	if err != nil {
		return fmt.Errorf("node %q: did not rejoin etcd: %w (its VM and OS disk are replaced; check `talosctl -n %s dmesg` and rerun `milner up`)", r.Node, err, r.Node)
	}
	_, _ = fmt.Fprintf(o.Out, "milner up: %s: an etcd member again\n", r.Node)
	return nil
}

// WaitVoter waits, up to timeout, until a control plane just added to
// the running cluster is a voting etcd member: Talos joins it as a
// learner and promotes it once it has caught up (talos v1.13.9
// internal/app/machined/pkg/system/services/etcd.go promoteMember, asked
// every 15 s), and etcd lets one learner in at a time, so the next
// control plane's join waits for this promotion.
func (c *Cluster) WaitVoter(ctx context.Context, node string, timeout time.Duration, o Options) error {
	i := slices.IndexFunc(c.declared.controlPlanes(), func(n Node) bool { return n.Name != node })
	if i < 0 {
		return nil // the only control plane: it bootstrapped etcd
	}
	via := c.declared.controlPlanes()[i].Name
	_, _ = fmt.Fprintf(o.Out, "milner up: %s: waiting up to %s for it to be a voting etcd member\n", node, timeout)
	if err := c.waitVoter(ctx, via, node, 0, timeout, o); err != nil {
		return fmt.Errorf("node %q: not a voting etcd member: %w (its config is applied; check `talosctl -n %s service etcd` and rerun `milner up`)", node, err, node)
	}
	_, _ = fmt.Fprintf(o.Out, "milner up: %s: a voting etcd member\n", node)
	return nil
}

// waitVoter waits until node is a voting member, under another id than
// old, in the member list asked through via.
func (c *Cluster) waitVoter(ctx context.Context, via, node string, old uint64, timeout time.Duration, o Options) error {
	return waitFor(ctx, o, timeout, func() error {
		ms, err := c.members(ctx, Node{Name: via})
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.GetHostname() == node && m.GetId() != old {
				if m.GetIsLearner() {
					return errors.New("a learner, not promoted yet")
				}
				return nil
			}
		}
		return errors.New("not an etcd member yet")
	})
}
