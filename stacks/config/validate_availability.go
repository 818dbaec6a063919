package config

// Availability a stack asks for and cannot have (issue #33): refused at
// load, not found out when a pod stays pending or a peer's loss stops the
// service.

import (
	"slices"
	"strings"

	"github.com/milner/milner/components/vocab"
)

// checkVaultQuorum: raft commits with a majority of its peers. Two peers
// need both (a majority of 2 is 2), so either one's loss stops Vault: more
// peers and no more tolerance than one. And vault-helm schedules one
// server per node (values.yaml server.affinity, 0.29.1 line 611: a
// required podAntiAffinity on kubernetes.io/hostname), so more peers than
// nodes that take workloads leave the rest pending and, past a majority,
// no quorum ever forms. Other even counts tolerate as many failures as
// one fewer: a warning. An existing cluster's nodes are not known here.
func (c *Config) checkVaultQuorum(p *problems, at string, replicas int) {
	switch {
	case replicas < 1 || replicas > 7:
		p.addf(at, "%d is outside 1..7 raft peers", replicas)
		return
	case replicas == 2:
		p.addf(at, "2 raft peers keep quorum only while both run (a majority of 2 is 2): the loss of either node stops Vault; use 1, or 3 for HA")
		return
	case replicas%2 == 0:
		p.warnf(at, "%d raft peers tolerate no more failures than %d", replicas, replicas-1)
	}
	if !c.Declares(LayerTalos) {
		return
	}
	if n := c.schedulableNodes(); replicas > n {
		// A cluster of control planes alone schedules on them by default;
		// its first worker turns that default off, which leaves fewer nodes
		// taking workloads than before the worker: name the cause.
		why := ""
		if c.Cluster.defaultScheduling && !*c.Cluster.AllowSchedulingOnControlPlanes && slices.ContainsFunc(c.Nodes, func(n NodeConfig) bool { return n.Role == vocab.RoleControlPlane }) {
			why = "; the control planes take none: milner:cluster.allowSchedulingOnControlPlanes is unset, which means false once the stack has a worker (set it true to keep them scheduling)"
		}
		p.addf(at, "%d raft peers but %d nodes take workloads: the chart places one peer per node, so %d would stay pending; lower replicas or add workers%s", replicas, n, replicas-n, why)
	}
}

// schedulableNodes counts the nodes pods other than the workloads' can
// run on: workers, and control planes when they allow scheduling, that
// milner:workloads does not dedicate (its taint keeps other pods off).
func (c *Config) schedulableNodes() int {
	var dedicated []string
	if w := c.Workloads; w != nil {
		dedicated = w.DedicatedNodes
	}
	n := 0
	for _, node := range c.Nodes {
		if c.takesPods(node) && !slices.Contains(dedicated, node.Name) {
			n++
		}
	}
	return n
}

// zeroQuantity reports whether a quantity (already matched by quantity)
// is zero: every digit of its number is 0, whatever its suffix.
func zeroQuantity(q string) bool {
	num := strings.TrimRight(q, "KMGTPEkmnui")
	if i := strings.IndexAny(num, "eE"); i >= 0 {
		num = num[:i]
	}
	return strings.Trim(num, "0.") == ""
}
