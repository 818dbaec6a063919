package upgrade

import (
	"context"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/milner/milner/internal/stackfile"
)

// fiveNodes declares control planes and workers interleaved in config
// order, all on the old Talos.
func fiveNodes() []fakeSpec {
	return []fakeSpec{
		{"cp-1", "controlplane", fromTalos, k8sVer},
		{"w-1", "worker", fromTalos, k8sVer},
		{"cp-2", "controlplane", fromTalos, k8sVer},
		{"cp-3", "controlplane", fromTalos, k8sVer},
		{"w-2", "worker", fromTalos, k8sVer},
	}
}

func yes(*Plan) bool { return true }

func run(t *testing.T, d Declared, talosconfig string) (string, error) {
	t.Helper()
	var out strings.Builder
	err := Execute(context.Background(), connect(t, d, talosconfig), testOptions(&out), false, yes)
	return out.String(), err
}

func TestUpgradeOrderControlPlanesFirstOneAtATimePreserving(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	out, err := run(t, d, tc)
	require.NoError(t, err, out)

	want := []string{"cp-1", "cp-2", "cp-3", "w-1", "w-2"}
	var got []string
	for _, u := range fc.upgrades() {
		got = append(got, strings.Fields(u)[0])
		assert.Contains(t, u, "image="+installer+" preserve=true stage=false force=false")
	}
	assert.Equal(t, want, got)
	assert.Empty(t, fc.violations, "an Upgrade was sent while another node rebooted")
	for _, n := range fc.nodes {
		assert.Equal(t, toTalos, n.version, n.name)
	}
	// The health gate (etcd member list) runs before every Upgrade and after
	// every node's reboot, the last one included.
	fc.mu.Lock()
	defer fc.mu.Unlock()
	gates := 0
	for _, e := range fc.journal {
		switch {
		case strings.HasSuffix(e, "EtcdMemberList"):
			gates++
		case strings.Contains(e, " Upgrade "):
			assert.Positive(t, gates, "no health gate before %q", e)
			gates = 0
		case strings.Contains(e, " booted "):
			gates = 0
		}
	}
	assert.Positive(t, gates, "no health gate after the last node")
}

func TestHealthGateBeforeFirstNodeTouchesNothing(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	fc.mu.Lock()
	fc.node("w-2").setStatus(runtime.MachineStageRunning, false)
	fc.mu.Unlock()

	_, err := run(t, d, tc)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "cp-1", stop.Node)
	assert.Equal(t, "health gate before", stop.Stage)
	assert.ErrorContains(t, err, `node "w-2": not ready`)
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3", "w-1", "w-2"}, stop.Untouched)
	assert.Empty(t, fc.upgrades())
}

func TestHealthGateAfterNodeStopsTheRun(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	fc.node("cp-1").etcdErrsAfter = []string{"etcdserver: no leader"}

	_, err := run(t, d, tc)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "cp-1", stop.Node)
	assert.Equal(t, "health gate after", stop.Stage)
	assert.ErrorContains(t, err, "etcdserver: no leader")
	assert.Equal(t, []string{"cp-1"}, stop.Upgraded)
	assert.Equal(t, []string{"cp-2", "cp-3", "w-1", "w-2"}, stop.Untouched)
	assert.Len(t, fc.upgrades(), 1)
}

func TestNodeNotReadyAfterRebootStopsTheRun(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	fc.node("cp-2").readyAfter = false

	_, err := run(t, d, tc)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "cp-2", stop.Node)
	assert.Equal(t, "health gate after", stop.Stage)
	assert.ErrorContains(t, err, `node "cp-2": not ready (nodeReady: node is not ready)`)
	assert.Len(t, fc.upgrades(), 2)
}

func TestFirstFailureStopsOthersUntouchedAndRerunResumes(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	fc.node("cp-2").upgradeErr = status.Error(codes.FailedPrecondition, "etcd member is not healthy")

	_, err := run(t, d, tc)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "cp-2", stop.Node)
	assert.Equal(t, "upgrade", stop.Stage)
	assert.ErrorContains(t, err, `upgrade stopped at node "cp-2" (upgrade)`)
	assert.ErrorContains(t, err, "etcd member is not healthy")
	assert.Equal(t, []string{"cp-1"}, stop.Upgraded)
	assert.Equal(t, []string{"cp-3", "w-1", "w-2"}, stop.Untouched)
	for _, name := range []string{"cp-2", "cp-3", "w-1", "w-2"} {
		assert.Equal(t, fromTalos, fc.node(name).version, name)
	}

	// The cause is fixed; the rerun skips cp-1 and finishes the rest.
	fc.node("cp-2").upgradeErr = nil
	fc.mu.Lock()
	fc.journal = nil
	fc.mu.Unlock()
	out, err := run(t, d, tc)
	require.NoError(t, err, out)
	assert.Contains(t, out, "= cp-1")
	var got []string
	for _, u := range fc.upgrades() {
		got = append(got, strings.Fields(u)[0])
	}
	assert.Equal(t, []string{"cp-2", "cp-3", "w-1", "w-2"}, got)
}

func TestWrongVersionAfterRebootIsAFailure(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	fc.node("cp-1").comesBackOn = fromTalos // Talos booted the previous image

	_, err := run(t, d, tc)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "cp-1", stop.Node)
	assert.Equal(t, "version", stop.Stage)
	assert.ErrorContains(t, err, "came back on Talos "+fromTalos+", want "+toTalos)
	assert.Len(t, fc.upgrades(), 1)
}

func TestDryRunChangesNothing(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	var out strings.Builder
	called := false
	err := Execute(context.Background(), connect(t, d, tc), testOptions(&out), true, func(*Plan) bool { called = true; return true })
	require.NoError(t, err)
	assert.False(t, called, "a dry run asked for confirmation")
	assert.Empty(t, fc.upgrades())
	for _, n := range fc.nodes {
		assert.Equal(t, fromTalos, n.version)
	}
	assert.Contains(t, out.String(), "1. Talos "+toTalos)
	assert.Contains(t, out.String(), "cp-1         controlplane "+fromTalos+" -> "+toTalos)
	assert.Contains(t, out.String(), "w-2          worker "+fromTalos+" -> "+toTalos)
	assert.Contains(t, out.String(), "dry run: nothing was changed")
}

func TestNotConfirmedChangesNothing(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	var out strings.Builder
	err := Execute(context.Background(), connect(t, d, tc), testOptions(&out), false, func(*Plan) bool { return false })
	require.ErrorContains(t, err, "not confirmed")
	assert.Empty(t, fc.upgrades())
}

// TestKubernetesRunsAfterEveryNode runs upstream's upgrade-k8s as
// production does: it starts (asking the Talos API of the plan's control
// plane for a kubeconfig, which the fake does not serve) only after every
// node's Talos upgrade.
func TestKubernetesRunsAfterEveryNode(t *testing.T) {
	specs := fiveNodes()
	for i := range specs {
		specs[i].k8s = "v1.33.5"
	}
	fc, d, tc := newFake(t, specs...)
	c := connect(t, d, tc)
	plan, err := MakePlan(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, plan.Stages, 2)
	assert.Equal(t, toTalos, plan.Stages[0].Talos)
	assert.Len(t, plan.Stages[0].Nodes, 5)
	assert.Equal(t, &KubernetesStep{From: "v1.33.5", To: k8sVer, Via: d.Nodes[0], Endpoint: d.KubernetesEndpoint}, plan.Stages[1].Kubernetes)
	var out strings.Builder
	err = Execute(context.Background(), c, testOptions(&out), false, yes)
	var stop *StopError
	require.ErrorAs(t, err, &stop, out.String())
	assert.Equal(t, "kubernetes", stop.Stage)
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3", "w-1", "w-2"}, stop.Upgraded)
	fc.mu.Lock()
	defer fc.mu.Unlock()
	last := ""
	for _, e := range fc.journal {
		if strings.Contains(e, " Upgrade ") || strings.Contains(e, " Kubeconfig") {
			last = e
		}
	}
	assert.Equal(t, d.Nodes[0].Name+" Kubeconfig", last, "Kubernetes must come after every node's Talos upgrade")
}

func TestUpstreamKubernetesUpgradeFailureIsReported(t *testing.T) {
	specs := []fakeSpec{{"cp-1", "controlplane", toTalos, "v1.33.5"}}
	_, d, tc := newFake(t, specs...)
	_, err := run(t, d, tc)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "kubernetes", stop.Stage)
	// The fake serves no kubeconfig: upstream's upgrade-k8s stops at its
	// first step, building the Kubernetes client.
	assert.ErrorContains(t, err, "kubernetes v1.33.5 -> "+k8sVer)
	assert.ErrorContains(t, err, "error building kubernetes client")
	assert.ErrorContains(t, err, "Kubeconfig")
}

func TestPlanRefusesWhatTalosRefuses(t *testing.T) {
	_, d, tc := newFake(t,
		fakeSpec{"cp-1", "controlplane", fromTalos, "v1.35.0"},
		fakeSpec{"w-1", "worker", fromTalos, k8sVer},
	)
	d.Nodes = append(d.Nodes, Node{Name: "w-9", Role: "worker", Endpoint: "127.0.0.1:1"})
	_, err := MakePlan(context.Background(), connect(t, d, tc))
	require.Error(t, err)
	assert.ErrorContains(t, err, `node "w-9": talos version`)
	assert.ErrorContains(t, err, "nothing was changed")

	d.Nodes = d.Nodes[:2]
	_, err = MakePlan(context.Background(), connect(t, d, tc))
	assert.ErrorContains(t, err, `node "cp-1" runs Kubernetes v1.35.0, newer than the declared v1.34.1: downgrades are refused`)
}

func TestInventoryShowsDeclaredAgainstRunning(t *testing.T) {
	_, d, tc := newFake(t,
		fakeSpec{"cp-1", "controlplane", toTalos, k8sVer},
		fakeSpec{"w-1", "worker", fromTalos, k8sVer},
	)
	rows := Inventory(context.Background(), connect(t, d, tc))
	require.Len(t, rows, 2)
	const noConfig = "not known: this Talos has no persistent MachineConfig (v1.10 and later have)" // the fake serves no MachineConfig
	assert.Equal(t, Row{Node: d.Nodes[0], Talos: toTalos, Kubelet: k8sVer, APIServer: k8sVer, Staged: noConfig}, rows[0])
	assert.Equal(t, Row{Node: d.Nodes[1], Talos: fromTalos, Kubelet: k8sVer, Staged: noConfig}, rows[1])
	var out strings.Builder
	Versions{Declared: d, Rows: rows}.Write(&out)
	assert.Contains(t, out.String(), fromTalos+" (declared "+toTalos+") *")
}

func TestFromConfigReadsTheStackFile(t *testing.T) {
	s, err := stackfile.Read("../../Pulumi.dev.yaml", nil)
	require.NoError(t, err)
	d := FromConfig(s.Config)
	assert.Equal(t, s.Config.Cluster.TalosVersion, d.TalosVersion)
	assert.Equal(t, "ghcr.io/siderolabs/installer:"+d.TalosVersion, d.InstallImage)
	require.Len(t, d.Nodes, len(s.Config.Nodes))
	for i, n := range s.Config.Nodes {
		assert.Equal(t, Node{Name: n.Name, Role: n.Role, Endpoint: n.Addr.String()}, d.Nodes[i])
	}
}
