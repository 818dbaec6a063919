package talosapi

import (
	"net/netip"
	"slices"
	"time"
)

// The shared IP (machine.network.interfaces[].vip), as Talos v1.13.9
// elects its holder (internal/app/machined/pkg/controllers/network/
// operator/vip.go, VIP.campaign):
//
//   - a control plane campaigns once its etcd service runs healthy
//     (waitForPreconditions) and its kubelet lifecycle is up, through its
//     own etcd (etcd.NewLocalClient), so not while its member is a
//     learner (etcd refuses a learner's writes) nor without a quorum; a
//     failed campaign is tried again after campaignRetryInterval (1 s);
//   - the election (etcd's concurrency.Election) is a queue ordered by
//     the campaigns' create revisions: the first campaigner wins, the
//     next waits behind it. The winner announces the address
//     (markAsLeader, VIP handler Acquire) at once;
//   - the holder gives it up when its etcd stops or its kube-apiserver's
//     static pod goes, or its kubelet lifecycle tears down (Talos'
//     shutdown and reboot sequences), or its config no longer carries the
//     VIP: it resigns and revokes its session, and the next in the queue
//     takes the address at once;
//   - a holder that vanishes without resigning (power cut, or its own
//     etcd stopped: the resign goes through it) leaves its key in the
//     queue until its session's lease expires (concurrency.NewSession's
//     default TTL, 60 s; Talos' internal/pkg/etcd/session.go says so
//     too): until then no one holds the address. A holder cut off the
//     network keeps it (its session lives until the lease runs out at the
//     others) and, cut for longer than the lease, loses it to the next in
//     the queue at once.
//
// The double keeps that: who holds each VIP (VIPHolder), acquired by the
// first eligible campaigner, released at once on a graceful halt, after
// WithVIPLeaseTTL on a power cut or when the holder's etcd stops, and
// after a network cut only once it lasted WithVIPLeaseTTL. Each change is
// a "vip" event in the journal ("acquired <ip>", "released <ip>").

// WithVIPLeaseTTL is how long a VIP stays unheld after its holder
// vanished without resigning (default 0: the next takes it at once).
// Talos' etcd session lease is 60 s (vip.go's concurrency.NewSession with
// its default TTL).
func WithVIPLeaseTTL(d time.Duration) Option {
	return func(o *clusterOptions) { o.vipTTL = d }
}

// vipState is one shared IP's election.
type vipState struct {
	holder *Node
	// cut is since when the holder's network is cut (zero: it is not).
	cut time.Time
	// orphaned until: a vanished holder's key still heads the queue.
	orphaned time.Time
}

// VIPHolder is the node that holds vip, or nil.
func (c *Cluster) VIPHolder(vip netip.Addr) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := c.vips[vip]; v != nil {
		return v.holder
	}
	return nil
}

// campaignerLocked reports whether n campaigns for vip now.
func (c *Cluster) campaignerLocked(n *Node, vip netip.Addr) bool {
	if n.inc == nil || !n.booted || !n.reachable || !n.controlPlaneLocked() {
		return false
	}
	if n.member == nil || !n.member.upLocked() || n.member.learner || !c.quorumLocked() {
		return false
	}
	return n.networkLocked().vip == vip
}

// electLocked runs every VIP's election (c.mu held).
func (c *Cluster) electLocked() {
	now := time.Now()
	for _, n := range c.nodes {
		if vip := n.networkLocked().vip; vip.IsValid() && c.vips[vip] == nil {
			if c.vips == nil {
				c.vips = map[netip.Addr]*vipState{}
			}
			c.vips[vip] = &vipState{}
		}
	}
	for vip, v := range c.vips {
		var queue []*Node
		for _, n := range c.nodes {
			if c.campaignerLocked(n, vip) {
				if n.campaigning.IsZero() {
					n.campaigning = now
				}
				queue = append(queue, n)
			} else if v.holder != n {
				n.campaigning = time.Time{}
			}
		}
		if h := v.holder; h != nil && h.inc != nil && !h.reachable && c.opts.vipTTL > 0 {
			// Cut off, the holder keeps its session until its lease runs
			// out at the others (its keep-alives do not reach them), then
			// the queue's next wins at once; back within the lease, it
			// holds on.
			if v.cut.IsZero() {
				v.cut = now
				time.AfterFunc(c.opts.vipTTL, func() {
					c.mu.Lock()
					defer c.mu.Unlock()
					c.syncLocked()
				})
			}
			if now.Before(v.cut.Add(c.opts.vipTTL)) {
				continue
			}
			v.holder, h.campaigning, v.cut = nil, time.Time{}, time.Time{}
			h.eventLocked("vip", "released "+vip.String())
		} else if h != nil {
			v.cut = time.Time{}
		}
		if h := v.holder; h != nil && !slices.Contains(queue, h) {
			v.holder, h.campaigning = nil, time.Time{}
			h.eventLocked("vip", "released "+vip.String())
			// Resign and RevokeSession go through the holder's own etcd
			// (etcd.NewLocalClient): after a power cut or its etcd's stop
			// they fail, and the key stays until its lease expires.
			if (h.haltedHard || (h.inc != nil && !h.etcdRunning)) && c.opts.vipTTL > 0 {
				v.orphaned = now.Add(c.opts.vipTTL)
				time.AfterFunc(c.opts.vipTTL, func() {
					c.mu.Lock()
					defer c.mu.Unlock()
					c.syncLocked()
				})
			}
		}
		if v.holder != nil || len(queue) == 0 || now.Before(v.orphaned) {
			continue
		}
		slices.SortStableFunc(queue, func(a, b *Node) int { return a.campaigning.Compare(b.campaigning) })
		v.holder = queue[0]
		v.holder.eventLocked("vip", "acquired "+vip.String())
	}
}
