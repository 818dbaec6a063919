package upgrade

import (
	"context"
	"fmt"
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
	cps := d.controlPlanes()
	if len(cps) == 0 {
		return Etcd{Unanswered: []string{"no control plane is declared"}}
	}
	members := make([][]*machine.EtcdMember, len(cps))
	errs := make([]error, len(cps))
	err := dial(ctx, cfg, Declared{Nodes: cps}, timeout, func(ctx context.Context, c *Cluster) {
		each(cps, func(i int, n Node) { members[i], errs[i] = c.members(ctx, n) })
	})
	if err != nil {
		return Etcd{Unanswered: []string{err.Error()}}
	}
	var e Etcd
	for i, n := range cps {
		switch {
		case errs[i] != nil:
			e.Unanswered = append(e.Unanswered, fmt.Sprintf("%s: %v", n.Name, errs[i]))
		case len(members[i]) == 0:
			e.Unanswered = append(e.Unanswered, n.Name+": no members")
		case e.Node == "":
			e.Node = n.Name
			for _, m := range members[i] {
				e.Members = append(e.Members, m.GetHostname())
			}
		}
	}
	return e
}
