package talosapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/milner/milner/tests/talosapi"
)

// testDrain is a drain fast enough for a unit test.
var testDrain = talosapi.DrainTiming{Timeout: 400 * time.Millisecond, EvictRetry: 20 * time.Millisecond, CordonWait: 300 * time.Millisecond, DeleteWait: 300 * time.Millisecond, DeletePoll: 10 * time.Millisecond}

// kube is a fake Kubernetes API with Node w-1 and three pods on it: web-0
// (a ReplicaSet's, its eviction refused as a PodDisruptionBudget refuses
// it: 429), api-0 (a ReplicaSet's, evictable: the eviction deletes it) and
// kube-proxy-w-1 (a DaemonSet's). listErr, when set, fails the pod list.
func kube(t *testing.T, listErr error) *fake.Clientset {
	t.Helper()
	pod := func(ns, name, kind string) *corev1.Pod {
		yes := true
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
			OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: "owner", Controller: &yes}}},
			Spec: corev1.PodSpec{NodeName: "w-1"}}
	}
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}},
		pod("default", "web-0", "ReplicaSet"), pod("default", "api-0", "ReplicaSet"), pod("kube-system", "kube-proxy-w-1", "DaemonSet"))
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		if name == "web-0" {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), a.GetNamespace(), name)
	})
	if listErr != nil {
		cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, listErr })
	}
	return cs
}

func pods(t *testing.T, cs *fake.Clientset) []string {
	t.Helper()
	l, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	return out
}

func cordoned(t *testing.T, cs *fake.Clientset) bool {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), "w-1", metav1.GetOptions{})
	require.NoError(t, err)
	return n.Spec.Unschedulable
}

// Upgrade pulls the installer before it answers, then cordons and drains
// the node as Talos does: the evictable pod is evicted, the DaemonSet pod
// left, and the pod a PodDisruptionBudget keeps is given up with a WARNING
// once the drain's timeout passed; the node then installs and reboots
// (Talos v1.13.9 pkg/kubernetes Drain only logs a failed eviction), and is
// uncordoned once back.
func TestUpgradeDrainsFirst(t *testing.T) {
	cs := kube(t, nil)
	e := newEnv(t, talosapi.WithKubernetes(cs, testDrain), talosapi.WithInstallerPull(300*time.Millisecond))
	e.configured("cp-1", 2, e.cp) // its trustd issues the worker's certificate
	n := e.configured("w-1", 1, e.w, talosapi.WithVersion("v1.12.0"))
	boot := n.Status().BootID
	start := time.Now()
	_, err := e.client(n).UpgradeWithOptions(ctx(t), client.WithUpgradeImage("ghcr.io/siderolabs/installer:v1.13.9"), client.WithUpgradePreserve(true)) //nolint:staticcheck // the API milner uses below v1.13
	require.NoError(t, err)
	answered := time.Since(start)
	assert.GreaterOrEqual(t, answered, 300*time.Millisecond, "the installer is pulled before Upgrade answers")
	assert.Equal(t, boot, n.Status().BootID)
	waitFor(t, "the cordon", func() bool { return cordoned(t, cs) })
	waitFor(t, "the reboot", func() bool { return len(n.Journal().Events("reboot")) == 1 })
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond+testDrain.Timeout, "the reboot waits for the drain's timeout")
	assert.ElementsMatch(t, []string{"web-0", "kube-proxy-w-1"}, pods(t, cs))
	warn := n.Journal().Events("drain-warning")
	require.Len(t, warn, 1)
	assert.Contains(t, warn[0].Detail, "WARNING: failed to evict pod: failed to evict pod default/web-0")
	waitFor(t, "the new version", func() bool { return n.Status().Version == "v1.13.9" && n.Status().Booted })
	waitFor(t, "the uncordon", func() bool { return !cordoned(t, cs) })
	assert.Empty(t, n.Journal().Events("sequence-failed"))
}

// A drain that fails (the pods cannot be listed) fails the upgrade
// sequence: no reboot, the same boot and version, and the failure is
// published as Controller.Run does, a SequenceEvent with the error under
// the call's actor ID.
func TestFailedDrainAbortsTheUpgrade(t *testing.T) {
	cs := kube(t, errors.New("connection refused"))
	e := newEnv(t, talosapi.WithKubernetes(cs, testDrain))
	e.configured("cp-1", 2, e.cp) // its trustd issues the worker's certificate
	n := e.configured("w-1", 1, e.w, talosapi.WithVersion("v1.12.0"))
	boot := n.Status().BootID
	cl := e.client(n)
	resp, err := cl.UpgradeWithOptions(ctx(t), client.WithUpgradeImage("ghcr.io/siderolabs/installer:v1.13.9"), client.WithUpgradePreserve(true)) //nolint:staticcheck // as above
	require.NoError(t, err)
	actor := resp.GetMessages()[0].GetActorId()
	ch := make(chan client.EventResult)
	require.NoError(t, cl.EventsWatchV2(ctx(t), ch, client.WithTailEvents(-1), client.WithActorID(actor)))
	var got string
	for got == "" {
		select {
		case r := <-ch:
			require.NoError(t, r.Error)
			if s, ok := r.Event.Payload.(*machine.SequenceEvent); ok && s.GetError() != nil {
				assert.Equal(t, "upgrade", s.GetSequence())
				got = s.GetError().GetMessage()
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no sequence error")
		}
	}
	assert.Equal(t, "sequence failed: error running phase 1 in upgrade sequence: task 1/1: failed, cannot get pods for node w-1: connection refused", got)
	time.Sleep(200 * time.Millisecond)
	assert.Empty(t, n.Journal().Events("reboot"))
	assert.Equal(t, boot, n.Status().BootID)
	assert.Equal(t, "v1.12.0", n.Status().Version)
	require.Len(t, n.Journal().Events("sequence-failed"), 1)
}

// Shutdown without force drains first (phase 2 of Talos' shutdown
// sequence) and a failed drain leaves the node running; with force it
// powers off without a drain.
func TestShutdownDrainsFirst(t *testing.T) {
	cs := kube(t, nil)
	e := newEnv(t, talosapi.WithKubernetes(cs, testDrain))
	e.configured("cp-1", 2, e.cp) // its trustd issues the worker's certificate
	n := e.configured("w-1", 1, e.w)
	require.NoError(t, e.client(n).Shutdown(ctx(t)))
	waitFor(t, "the power-off", func() bool { return !n.Status().On })
	assert.ElementsMatch(t, []string{"web-0", "kube-proxy-w-1"}, pods(t, cs))
	assert.True(t, cordoned(t, cs))

	cs = kube(t, errors.New("connection refused"))
	e = newEnv(t, talosapi.WithKubernetes(cs, testDrain))
	e.configured("cp-1", 2, e.cp)
	n = e.configured("w-1", 1, e.w)
	require.NoError(t, e.client(n).Shutdown(ctx(t)))
	waitFor(t, "the failed sequence", func() bool { return len(n.Journal().Events("sequence-failed")) == 1 })
	assert.True(t, strings.HasPrefix(n.Journal().Events("sequence-failed")[0].Detail, "error running phase 2 in shutdown sequence"))
	assert.True(t, n.Status().On)
	require.NoError(t, e.client(n).Shutdown(ctx(t), client.WithShutdownForce(true)))
	waitFor(t, "the forced power-off", func() bool { return !n.Status().On })
}
