package pipeline

import (
	"slices"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
)

// afterAdd runs once an up applied: a control plane it added to the
// running cluster is waited for until it is a voting etcd member (Talos
// joins it as a learner; upgrade.WaitVoter), so the run ends with the
// cluster ready for the next node. Talos' health check, which the apply
// ran, does not wait for the promotion (talos pkg/cluster/check etcd.go
// compares the members with the control planes, learners included).
func afterAdd(o *Op) error {
	added := addedControlPlanes(o.plan.report, o.cfg)
	if len(added) == 0 {
		return nil
	}
	c, err := o.talosCluster()
	if err != nil || c == nil {
		return err
	}
	for _, n := range added {
		if err := c.WaitVoter(o.Ctx, n, rejoinTimeout, upgrade.DefaultOptions(o.Out)); err != nil {
			return err
		}
	}
	return nil
}

// addedControlPlanes are the control planes whose first config the report
// creates on a running cluster (one whose secrets bundle the plan keeps).
func addedControlPlanes(r gate.Report, cfg *config.Config) []string {
	var out []string
	for _, c := range r.Delta(gate.Talos).Of(gate.Create) {
		if c.Type == gate.TypeTalosSecrets {
			return nil // a new cluster: its control planes join as it is made
		}
		if c.Type == gate.TypeConfigApply && slices.ContainsFunc(cfg.Nodes, func(n config.NodeConfig) bool {
			return n.Name == c.Node && n.Role == vocab.RoleControlPlane
		}) {
			out = append(out, c.Node)
		}
	}
	return out
}
