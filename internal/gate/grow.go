package gate

import (
	"fmt"
	"slices"
	"strings"
)

// CheckOneNewNode refuses a plan that adds more than one node to a running
// cluster. A node is new when the plan creates both its VM and its Talos
// configuration; the cluster runs when the plan keeps its secrets bundle
// (a bundle created with the nodes is a new cluster, and a recovery's
// applies land on VMs already in state). One node per run: a node that
// does not come up stops the run with nothing else half-joined, and a
// control plane joins etcd alone: Talos adds it as a learner and promotes
// it once it has caught up (v1.13.9 internal/app/machined/pkg/system/
// services/etcd.go: MemberAddAsLearner, then MemberPromote), and etcd
// holds one learner at a time by default (v3.6 --max-learners 1,
// membership/cluster.go ValidateMaxLearnerConfig: a second is refused
// "too many learner members in cluster").
func CheckOneNewNode(r Report, stack string) []Refusal {
	var vms, applies []string
	for _, d := range r.Deltas {
		for _, c := range d.Of(Create) {
			switch {
			case c.Type == TypeTalosSecrets:
				return nil // a new cluster: every node comes up in one run
			case d.Layer == Disposable && c.Node != "":
				vms = append(vms, c.Node)
			case c.Type == TypeConfigApply:
				applies = append(applies, c.Node)
			}
		}
	}
	var added []string
	for _, n := range applies {
		if slices.Contains(vms, n) {
			added = append(added, n)
		}
	}
	if len(added) < 2 {
		return nil
	}
	slices.Sort(added)
	var out []Refusal
	for _, n := range added[1:] {
		out = append(out, Refusal{n,
			fmt.Sprintf("the plan adds %d nodes to the running cluster (%s); milner up adds one node per run", len(added), strings.Join(added, ", ")),
			fmt.Sprintf("keep %s in milner:nodes and add %s in a later run: `milner up --stack %s` once %s is up", added[0], n, stack, added[0])})
	}
	return out
}
