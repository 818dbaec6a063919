package upgrade

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
)

// Etcd is what the control planes said about the cluster's etcd when asked
// whether it was bootstrapped.
type Etcd struct {
	// Node is the control plane that answered with a member list, "" when
	// none did.
	Node string
	// Members are the hostnames of the members it listed.
	Members []string
	// Unanswered says, per control plane (config order), why it gave no
	// member list.
	Unanswered []string
}

// Bootstrapped reports whether a control plane answered with etcd members:
// the only evidence Milner takes that the cluster's etcd was bootstrapped.
// Live VMs are not: a crash can leave the VMs of a cluster that never was,
// and a node in maintenance mode (no config yet) serves no etcd API.
func (e Etcd) Bootstrapped() bool { return len(e.Members) > 0 }

// String says what was found, for the operator.
func (e Etcd) String() string {
	if e.Bootstrapped() {
		return fmt.Sprintf("control plane %q lists %d etcd members %v", e.Node, len(e.Members), e.Members)
	}
	return fmt.Sprintf("no control plane listed etcd members (%v)", e.Unanswered)
}

// AskEtcd asks every declared control plane at once, within timeout, for
// etcd's member list (machine API EtcdMemberList, what `talosctl etcd
// members` calls) with the talosconfig cfg, and returns the first answer
// in config order that lists members. It never fails: a control plane that
// does not answer is a line of Unanswered.
func AskEtcd(ctx context.Context, cfg *clientconfig.Config, d Declared, timeout time.Duration) Etcd {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cps := Declared{Nodes: d.controlPlanes()}
	var e Etcd
	if len(cps.Nodes) == 0 {
		e.Unanswered = []string{"no control plane is declared"}
		return e
	}
	c, err := ConnectWith(ctx, cfg, cps)
	if err != nil {
		e.Unanswered = []string{err.Error()}
		return e
	}
	defer func() { _ = c.Close() }()
	members := make([][]string, len(cps.Nodes))
	errs := make([]error, len(cps.Nodes))
	var wg sync.WaitGroup
	for i, n := range cps.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			members[i], errs[i] = c.etcdMembers(ctx, n)
		}()
	}
	wg.Wait()
	for i, n := range cps.Nodes {
		switch {
		case errs[i] != nil:
			e.Unanswered = append(e.Unanswered, fmt.Sprintf("%s: %v", n.Name, errs[i]))
		case len(members[i]) == 0:
			e.Unanswered = append(e.Unanswered, n.Name+": no members")
		case e.Node == "":
			e.Node, e.Members = n.Name, members[i]
		}
	}
	return e
}

// etcdMembers asks one control plane for etcd's members' hostnames.
func (c *Cluster) etcdMembers(ctx context.Context, n Node) ([]string, error) {
	resp, err := c.clients[n.Name].EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range resp.GetMessages() {
		for _, mem := range m.GetMembers() {
			out = append(out, mem.GetHostname())
		}
	}
	return out, nil
}
