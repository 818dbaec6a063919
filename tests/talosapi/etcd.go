package talosapi

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdCluster is the cluster's etcd as machined's etcd calls see it: one
// cluster, bootstrapped once, every booted control plane with an empty
// data directory joining it (Talos' etcd service joins a bootstrapped
// cluster through the other control planes).
type etcdCluster struct {
	bootstrapped bool
	members      []*member
	// snapshots is what EtcdSnapshot streams (SetEtcdSnapshotSource).
	snapshots SnapshotSource
	// recoveredRevision is the revision a Bootstrap with RecoverEtcd
	// restored (recover.go).
	recoveredRevision int64
	// recoverSink is where a recovered snapshot's data goes
	// (SetEtcdRecoverSink).
	recoverSink RecoverSink
}

// member is one etcd member. Its node may have lost it (a wiped OS disk,
// a removed member): the member is then down.
type member struct {
	id   uint64
	name string
	ip   netip.Addr
	node *Node
	// learner: a joining member, not yet promoted; it does not vote.
	learner bool
}

// upLocked reports a member whose etcd answers: its node runs it, is
// booted and reachable.
func (m *member) upLocked() bool {
	n := m.node
	return n != nil && n.member == m && n.inc != nil && n.booted && n.reachable && n.etcdRunning
}

// BootstrapEtcd bootstraps etcd on the node as a Bootstrap call would,
// without the call (a cluster bootstrapped before the test): the same
// refusals.
func (n *Node) BootstrapEtcd() error {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	switch {
	case !n.booted:
		return errors.New("bootstrap is not available yet")
	case !n.controlPlaneLocked():
		return errors.New("bootstrap can only be performed on a control plane node")
	case n.etcdData:
		return errors.New("etcd data directory is not empty")
	}
	n.c.bootstrapLocked(n)
	return nil
}

// bootstrapLocked makes n etcd's first member; the other control planes
// join (c.mu held). A second bootstrap on another node would make a
// second etcd cluster in Talos; the double keeps one and journals the
// call, which the tests assert on.
func (c *Cluster) bootstrapLocked(n *Node) {
	c.etcd.bootstrapped = true
	c.joinLocked(n)
	c.syncLocked()
}

// joinLocked makes n a member: the bootstrap's first, or one joining the
// running cluster. Talos joins a control plane with an empty data
// directory as a learner (talos v1.13.9 internal/app/machined/pkg/system/
// services/etcd.go buildInitialCluster: MemberAddAsLearner) and promotes it
// from its own etcd service (promoteMember: MemberPromote, refused until
// the learner has caught up, asked again every 15 s for up to 10 minutes).
// The double promotes it after WithLearnerPromotion's delay (at once
// without one), once it is up.
func (c *Cluster) joinLocked(n *Node) {
	n.etcdData = true
	m := &member{id: rand.Uint64() | 1, name: n.hostnameLocked(), ip: n.addr.Addr(), node: n}
	n.member = m
	m.learner = len(c.etcd.members) > 0 && c.opts.promoteAfter > 0
	c.etcd.members = append(c.etcd.members, m)
	if m.learner {
		c.promoteLater(m)
	}
}

// promoteLater promotes a learner after the promotion delay, or tries
// again after another while it is down.
func (c *Cluster) promoteLater(m *member) {
	time.AfterFunc(c.opts.promoteAfter, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !slices.Contains(c.etcd.members, m) {
			return // removed meanwhile
		}
		if !m.upLocked() || !c.quorumLocked() {
			c.promoteLater(m)
			return
		}
		m.learner = false
		c.syncLocked() // a next control plane may join now
	})
}

// reconcileEtcdLocked joins every booted control plane with an empty data
// directory to a bootstrapped cluster that has a quorum (Talos' etcd
// service adds the member through the running members, talos v1.13.9
// services/etcd.go buildInitialCluster, and retries while there is no
// leader), one learner at a time: etcd refuses
// a second (v3.6 --max-learners 1, server/etcdserver/api/membership/
// cluster.go ValidateMaxLearnerConfig: "too many learner members in
// cluster"), and Talos' etcd service asks again until it is let in. Not
// one whose etcd service failed in a recover (it retries the recovery, in
// bootstrap mode, forever: etcd's restart.Forever in Talos'
// services/etcd.go).
func (c *Cluster) reconcileEtcdLocked() {
	if !c.etcd.bootstrapped || !c.quorumLocked() {
		return
	}
	for _, n := range c.nodes {
		if slices.ContainsFunc(c.etcd.members, func(m *member) bool { return m.learner }) {
			return
		}
		if n.controlPlaneLocked() && n.booted && n.inc != nil && !n.etcdData && n.etcdFailed == "" {
			c.joinLocked(n)
		}
	}
}

// removeMemberLocked removes a member; false if there is none with id.
func (c *Cluster) removeMemberLocked(id uint64) bool {
	for i, m := range c.etcd.members {
		if m.id == id {
			c.etcd.members = append(c.etcd.members[:i], c.etcd.members[i+1:]...)
			if m.node != nil && m.node.member == m {
				m.node.member = nil
			}
			c.syncLocked()
			return true
		}
	}
	return false
}

// quorumLocked reports whether a majority of the voting members is up
// (a learner does not vote).
func (c *Cluster) quorumLocked() bool {
	up, voters := 0, 0
	for _, m := range c.etcd.members {
		if m.learner {
			continue
		}
		voters++
		if m.upLocked() {
			up++
		}
	}
	return up > voters/2
}

// leaderLocked is the member that leads: the first one up, while there is
// a quorum.
func (c *Cluster) leaderLocked() *member {
	if !c.quorumLocked() {
		return nil
	}
	for _, m := range c.etcd.members {
		if m.upLocked() && !m.learner {
			return m
		}
	}
	return nil
}

// etcdClientLocked is why machined's etcd client through the control
// planes (etcd.NewClientFromControlPlaneIPs, with WithRequireLeader) gets
// no answer: before the bootstrap no control plane endpoints are known
// (etcd.GetEndpoints reads them from the Kubernetes API server's
// endpoints), without a quorum there is no leader.
func (c *Cluster) etcdClientLocked() error {
	if !c.etcd.bootstrapped {
		return errors.New("no controlplane endpoints discovered yet")
	}
	if !c.quorumLocked() {
		return status.Error(codes.Unavailable, "etcdserver: no leader")
	}
	return nil
}

// validateForUpgradeLocked is etcd.Client.ValidateForUpgrade (talos v1.9.5
// internal/pkg/etcd/etcd.go): the member list, no two-member cluster,
// every member started and healthy.
func (c *Cluster) validateForUpgradeLocked() error {
	if err := c.etcdClientLocked(); err != nil {
		return err
	}
	if len(c.etcd.members) == 2 {
		return fmt.Errorf("etcd member count(%d) is insufficient to maintain quorum if upgrade commences", len(c.etcd.members))
	}
	for _, m := range c.etcd.members {
		if !m.upLocked() {
			return fmt.Errorf("etcd member %016x is not healthy; all members must be healthy to perform an upgrade: %w", m.id,
				errors.New("context deadline exceeded"))
		}
	}
	return nil
}

// EtcdLearners returns the hostnames of the members not yet promoted.
func (c *Cluster) EtcdLearners() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.etcd.members {
		if m.learner {
			out = append(out, m.name)
		}
	}
	return out
}

// EtcdMembers returns the etcd members' IDs by hostname.
func (c *Cluster) EtcdMembers() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]uint64{}
	for _, m := range c.etcd.members {
		out[m.name] = m.id
	}
	return out
}

func hostPort(ip netip.Addr, port int) string {
	return net.JoinHostPort(ip.String(), strconv.Itoa(port))
}
