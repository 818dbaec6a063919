package upgrade_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	mtype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/milner/milner/components/vocab"
	. "github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/tests/talosapi"
)

// drainDouble is cp-1 (Talos v1.13.9, etcd bootstrapped) and workers w-1
// and w-2 on Talos v1.12.0, which `milner upgrade` moves to v1.13.9
// through MachineService.Upgrade, the Talos doubles draining through cs
// with Talos' drain timing scaled down, and the plan of that stage.
func drainDouble(t *testing.T, cs *fake.Clientset, drain talosapi.DrainTiming) (*talosapi.Cluster, *Cluster, *Plan) {
	t.Helper()
	s, err := talosapi.NewSecrets("test", "https://127.0.0.1:1")
	require.NoError(t, err)
	cp, err := s.Config(mtype.TypeControlPlane, "1.34.1")
	require.NoError(t, err)
	w, err := s.Config(mtype.TypeWorker, "1.34.1")
	require.NoError(t, err)
	tc, err := s.Talosconfig()
	require.NoError(t, err)
	c := talosapi.NewCluster(talosapi.WithKubernetes(cs, drain))
	t.Cleanup(func() { _ = c.Close() })
	d := Declared{TalosVersion: "v1.13.9", InstallImage: "ghcr.io/siderolabs/installer:v1.13.9"}
	stage := Stage{Talos: d.TalosVersion, Image: d.InstallImage}
	for i, name := range []string{"cp-1", "w-1", "w-2"} {
		cfg, role, version := w, vocab.RoleWorker, "v1.12.0"
		if i == 0 {
			cfg, role, version = cp, vocab.RoleControlPlane, "v1.13.9"
		}
		n, err := c.AddNode(name, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 33, byte(i + 1)}), 0),
			talosapi.WithVersion(version), talosapi.WithPlatformConfig(cfg))
		require.NoError(t, err)
		node := Node{Name: name, Role: role, Endpoint: n.Endpoint()}
		d.Nodes = append(d.Nodes, node)
		if i > 0 {
			stage.Nodes = append(stage.Nodes, Step{Node: node, From: version, To: d.TalosVersion})
		}
	}
	ctx := context.Background()
	cl, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(d.Nodes[0].Endpoint))
	require.NoError(t, err)
	defer func() { _ = cl.Close() }()
	require.NoError(t, cl.Bootstrap(ctx, &machine.BootstrapRequest{}))
	up, err := Connect(ctx, tc, d)
	require.NoError(t, err)
	t.Cleanup(func() { _ = up.Close() })
	require.Eventually(t, func() bool { return up.Healthy(ctx) == nil }, 10*time.Second, 20*time.Millisecond)
	c.ResetJournal()
	return c, up, &Plan{Declared: d, Stages: []Stage{stage}}
}

// workload is a fake Kubernetes API with Node w-1 and a ReplicaSet's pod
// web-0 on it whose eviction a PodDisruptionBudget refuses (429, the API
// server's words); listErr, when set, fails every pod list.
func workload(listErr error) *fake.Clientset {
	yes := true
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web", Controller: &yes}}},
			Spec: corev1.PodSpec{NodeName: "w-1"}})
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	})
	if listErr != nil {
		cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, listErr })
	}
	return cs
}

func sequenceOptions(out *strings.Builder) Options {
	return Options{Out: out, Poll: 20 * time.Millisecond, RebootTimeout: 8 * time.Second, HealthTimeout: 10 * time.Second, AppsTimeout: time.Second}
}

// TestFailedDrainStopsTheUpgradeAtOnce: Talos fails w-1's upgrade
// sequence in its drain phase (the node's pods cannot be listed), which
// it tells only in the node's events. The run stops at once with Talos'
// error, naming the cause, instead of waiting out the reboot timeout for a
// reboot that does not come; w-1 was not rebooted, w-2 not asked.
func TestFailedDrainStopsTheUpgradeAtOnce(t *testing.T) {
	drain := talosapi.DrainTiming{Timeout: time.Second, EvictRetry: 20 * time.Millisecond, CordonWait: time.Second, DeleteWait: time.Second, DeletePoll: 10 * time.Millisecond}
	c, up, plan := drainDouble(t, workload(errors.New("connection refused")), drain)
	var out strings.Builder
	start := time.Now()
	err := Run(context.Background(), up, plan, sequenceOptions(&out))
	took := time.Since(start)
	t.Log(out.String())
	var stop *StopError
	require.ErrorAs(t, err, &stop, "%v", err)
	assert.Equal(t, "w-1", stop.Node)
	assert.Equal(t, "upgrade", stop.Stage)
	assert.ErrorContains(t, err, "sequence failed: error running phase 1 in upgrade sequence: task 1/1: failed, cannot get pods for node w-1: connection refused")
	assert.Empty(t, stop.Upgraded)
	assert.Equal(t, []string{"w-2"}, stop.Untouched)
	assert.Less(t, took, 4*time.Second, "stopped at the sequence's error, not after the reboot wait")
	j := c.Journal()
	assert.Empty(t, j.Events("reboot"))
	assert.Empty(t, j.On("w-2").Calls("Upgrade"))
	assert.Equal(t, "v1.12.0", c.Node("w-1").Status().Version)
}

// TestBudgetKeptPodStopsTheUpgradeBeforeTalos: a PodDisruptionBudget that
// allows no disruption selects w-1's pod web-0. Talos would evict past it
// after its drain's timeout (below), so milner upgrade refuses w-1 before
// sending its Upgrade, naming the pod and the budget: nothing upgraded,
// nothing rebooted, w-2 untouched.
func TestBudgetKeptPodStopsTheUpgradeBeforeTalos(t *testing.T) {
	drain := talosapi.DrainTiming{Timeout: 500 * time.Millisecond, EvictRetry: 20 * time.Millisecond, CordonWait: time.Second, DeleteWait: time.Second, DeletePoll: 10 * time.Millisecond}
	cs := workload(nil)
	_, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	c, up, plan := drainDouble(t, cs, drain)
	SetKubernetes(up, cs)
	var out strings.Builder
	err = Run(context.Background(), up, plan, sequenceOptions(&out))
	t.Log(out.String())
	var stop *StopError
	require.ErrorAs(t, err, &stop, "%v", err)
	assert.Equal(t, "w-1", stop.Node)
	assert.Equal(t, "drain check", stop.Stage)
	assert.ErrorContains(t, err, "pod default/web-0, kept by PodDisruptionBudget default/web (disruptions allowed: 0)")
	assert.Empty(t, stop.Upgraded)
	assert.Equal(t, []string{"w-2"}, stop.Untouched)
	j := c.Journal()
	assert.Empty(t, j.Calls("Upgrade"), "no Upgrade sent")
	assert.Empty(t, j.Events("reboot"))
	assert.Equal(t, "v1.12.0", c.Node("w-1").Status().Version)
}

// TestBudgetBlockedDrainUpgradesAfterTheTimeout: a PodDisruptionBudget
// that refuses w-1's eviction does not fail Talos' upgrade: Talos asks
// again until its drain's timeout, gives the eviction up with a WARNING
// and upgrades and reboots the node with the pod on it (talos v1.13.9
// pkg/kubernetes Drain). The run goes on and shows the drain's phase.
// (Here the API refuses the eviction with no budget milner could read
// first: milner's own check is TestBudgetKeptPodStopsTheUpgradeBeforeTalos.)
func TestBudgetBlockedDrainUpgradesAfterTheTimeout(t *testing.T) {
	drain := talosapi.DrainTiming{Timeout: 500 * time.Millisecond, EvictRetry: 20 * time.Millisecond, CordonWait: time.Second, DeleteWait: time.Second, DeletePoll: 10 * time.Millisecond}
	c, up, plan := drainDouble(t, workload(nil), drain)
	var out strings.Builder
	require.NoError(t, Run(context.Background(), up, plan, sequenceOptions(&out)))
	t.Log(out.String())
	assert.Contains(t, out.String(), "w-1 -> Talos v1.13.9: Talos upgrade sequence: phase drain START")
	j := c.Journal()
	assert.Equal(t, []string{"w-1", "w-2"}, j.Events("reboot").Nodes())
	warn := j.Events("drain-warning")
	require.Len(t, warn, 1)
	assert.Contains(t, warn[0].Detail, "default/web-0")
	up1 := j.On("w-1").Calls("Upgrade")
	require.Len(t, up1, 1)
	assert.GreaterOrEqual(t, j.On("w-1").Events("reboot")[0].Time.Sub(up1[0].Done), drain.Timeout)
}
