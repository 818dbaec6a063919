package talosapi

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"

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
}

// member is one etcd member. Its node may have lost it (a wiped OS disk,
// a removed member): the member is then down.
type member struct {
	id   uint64
	name string
	ip   netip.Addr
	node *Node
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

func (c *Cluster) joinLocked(n *Node) {
	n.etcdData = true
	n.member = &member{id: rand.Uint64() | 1, name: n.hostnameLocked(), ip: n.addr.Addr(), node: n}
	c.etcd.members = append(c.etcd.members, n.member)
}

// reconcileEtcdLocked joins every booted control plane with an empty data
// directory to a bootstrapped cluster; not one whose etcd service failed
// in a recover (it retries the recovery, in bootstrap mode, forever:
// etcd's restart.Forever in Talos' services/etcd.go).
func (c *Cluster) reconcileEtcdLocked() {
	if !c.etcd.bootstrapped {
		return
	}
	for _, n := range c.nodes {
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

// quorumLocked reports whether a majority of the members is up.
func (c *Cluster) quorumLocked() bool {
	up := 0
	for _, m := range c.etcd.members {
		if m.upLocked() {
			up++
		}
	}
	return up > len(c.etcd.members)/2
}

// leaderLocked is the member that leads: the first one up, while there is
// a quorum.
func (c *Cluster) leaderLocked() *member {
	if !c.quorumLocked() {
		return nil
	}
	for _, m := range c.etcd.members {
		if m.upLocked() {
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
