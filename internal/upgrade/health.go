package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// Healthy is the health gate, asked of the Talos API alone:
//
//   - every declared node reports its MachineStatus (runtime namespace) in
//     stage running and ready. Talos sets ready only when time is synced,
//     the network is up, every service runs and is healthy (apid, machined,
//     kubelet; etcd and trustd on control planes), every static pod
//     (kube-apiserver, -controller-manager, -scheduler) is ready, and the
//     node's Kubernetes Node is Ready (talos v1.11.5
//     internal/app/machined/pkg/controllers/runtime/machine_status.go).
//   - etcd, asked through the first control plane: exactly one member per
//     declared control plane, none a learner; every control plane answers
//     EtcdStatus as one of those members with no errors; no etcd alarm.
//
// It does not ask the Kubernetes API (pods of apps, PodDisruptionBudgets):
// workloads are not drained.
func (c *Cluster) Healthy(ctx context.Context) error {
	var problems []string
	for _, n := range c.declared.Nodes {
		if err := c.machineReady(ctx, n); err != nil {
			problems = append(problems, fmt.Sprintf("node %q: %v", n.Name, err))
		}
	}
	problems = append(problems, c.etcdProblems(ctx)...)
	if len(problems) > 0 {
		return fmt.Errorf("cluster not healthy: %s", strings.Join(problems, "; "))
	}
	return nil
}

// machineReady reports why a node's MachineStatus is not running and ready.
func (c *Cluster) machineReady(ctx context.Context, n Node) error {
	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, c.clients[n.Name].COSI, runtime.MachineStatusID)
	if err != nil {
		return fmt.Errorf("machine status: %w", err)
	}
	spec := ms.TypedSpec()
	if spec.Stage != runtime.MachineStageRunning {
		return fmt.Errorf("machine stage is %s, want running", spec.Stage)
	}
	if !spec.Status.Ready {
		var unmet []string
		for _, u := range spec.Status.UnmetConditions {
			unmet = append(unmet, u.Name+": "+u.Reason)
		}
		return fmt.Errorf("not ready (%s)", strings.Join(unmet, ", "))
	}
	return nil
}

// etcdProblems checks etcd membership and every control plane's member.
func (c *Cluster) etcdProblems(ctx context.Context) []string {
	cps := c.declared.controlPlanes()
	if len(cps) == 0 {
		return nil
	}
	var problems []string
	members := map[uint64]string{}
	list, err := c.members(ctx, cps[0])
	if err != nil {
		problems = append(problems, fmt.Sprintf("etcd member list (via %q): %v", cps[0].Name, err))
	} else {
		for _, m := range list {
			members[m.GetId()] = m.GetHostname()
			if m.GetIsLearner() {
				problems = append(problems, fmt.Sprintf("etcd member %q is a learner", m.GetHostname()))
			}
		}
		if len(members) != len(cps) {
			problems = append(problems, fmt.Sprintf("etcd has %d members, want %d (one per control plane)", len(members), len(cps)))
		}
	}
	for _, n := range cps {
		if err := c.etcdMemberHealthy(ctx, n, members); err != nil {
			problems = append(problems, fmt.Sprintf("node %q: etcd: %v", n.Name, err))
		}
	}
	return problems
}

// etcdMemberHealthy checks one control plane's etcd member and alarms.
func (c *Cluster) etcdMemberHealthy(ctx context.Context, n Node, members map[uint64]string) error {
	id, err := c.etcdStatus(ctx, n)
	if err != nil {
		return err
	}
	if _, ok := members[id]; !ok && len(members) > 0 {
		return fmt.Errorf("member %x is not in the member list", id)
	}
	alarms, err := c.clients[n.Name].EtcdAlarmList(ctx)
	if err != nil {
		return fmt.Errorf("alarms: %w", err)
	}
	for _, m := range alarms.GetMessages() {
		for _, a := range m.GetMemberAlarms() {
			if a.GetAlarm() != machine.EtcdMemberAlarm_NONE {
				return fmt.Errorf("alarm %s on member %x", a.GetAlarm(), a.GetMemberId())
			}
		}
	}
	return nil
}

// etcdStatus asks node n for its own etcd member's status: its id, or why
// it does not answer or answers with errors.
func (c *Cluster) etcdStatus(ctx context.Context, n Node) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, memberCallTimeout)
	defer cancel()
	st, err := c.clients[n.Name].EtcdStatus(ctx)
	if err != nil {
		return 0, fmt.Errorf("status: %w", err)
	}
	if len(st.GetMessages()) != 1 {
		return 0, fmt.Errorf("status: want one answer, got %d", len(st.GetMessages()))
	}
	ms := st.GetMessages()[0].GetMemberStatus()
	if len(ms.GetErrors()) > 0 {
		return 0, errors.New(strings.Join(ms.GetErrors(), ", "))
	}
	return ms.GetMemberId(), nil
}
