package upgrade

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A drain that a PodDisruptionBudget blocks fails at its timeout naming
// the pod and the eviction API's refusal, not only "global timeout
// reached" (kubectl's helper writes the refusal to its ErrOut).
func TestDrainNamesTheBlockedPod(t *testing.T) {
	cs := blockedOn("w-2", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-2"}})
	var out strings.Builder
	err := Drain(context.Background(), cs, "w-2", time.Second, &out)
	if err == nil {
		t.Fatalf("the drain passed a budget that allows no disruption:\n%s", out.String())
	}
	for _, want := range []string{"pod apps/keeper", "disruption budget", "PodDisruptionBudget apps/keep-one"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if n, _ := cs.CoreV1().Nodes().Get(context.Background(), "w-2", metav1.GetOptions{}); !n.Spec.Unschedulable {
		t.Errorf("w-2 is not cordoned")
	}
}

// blockedOn is a Kubernetes API (fake clientset) holding objs and a
// Running pod apps/keeper on node that a PodDisruptionBudget allowing no
// disruption keeps: its eviction is refused as kube-apiserver refuses it
// (pkg/registry/core/pod/storage/eviction.go: 429).
func blockedOn(node string, objs ...runtime.Object) *fake.Clientset {
	cs := fake.NewClientset(append(objs,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "keeper", Namespace: "apps", Labels: map[string]string{"app": "keeper"}}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "keep-one", Namespace: "apps"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "keeper"}}}},
	)...)
	cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1"}}}}
	// The pods of a node, as kube-apiserver selects them by the field
	// spec.nodeName (the fake's tracker ignores field selectors).
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		fs := a.(k8stesting.ListAction).GetListRestrictions().Fields
		if fs == nil || fs.Empty() {
			return false, nil, nil
		}
		obj, err := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.PodList)
		list.Items = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return !fs.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName}) })
		return true, list, nil
	})
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		if _, ok := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction); !ok {
			return false, nil, nil
		}
		return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	})
	return cs
}

// A node below v1.13 is drained by Milner before its Upgrade: a drain a
// PodDisruptionBudget blocks stops the run at that node, naming the pod,
// with no Upgrade sent to it; the nodes upgraded before it are back,
// uncordoned. Fails with the drain before MachineService.Upgrade removed
// (w-1 is sent its Upgrade) and with the uncordon removed.
func TestBlockedDrainStopsBeforeTheUpgrade(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	var nodes []runtime.Object
	for _, n := range fiveNodes() {
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	}
	cs := blockedOn("w-1", nodes...)
	var out strings.Builder
	o := testOptions(&out)
	o.DrainTimeout = time.Second
	o.Kube = func(_ context.Context, n Node) (kubernetes.Interface, string, error) { return cs, n.Name, nil }
	err := Execute(context.Background(), connect(t, d, tc), o, false, yes)
	require.Error(t, err, out.String())
	for _, want := range []string{`node "w-1" (drain)`, "pod apps/keeper", "no upgrade was sent"} {
		assert.Contains(t, err.Error(), want)
	}
	var got []string
	for _, u := range fc.upgrades() {
		got = append(got, strings.Fields(u)[0])
	}
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, got, "Upgrade sent")
	for _, n := range []string{"cp-1", "cp-2", "cp-3", "w-1"} {
		node, err := cs.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, n == "w-1", node.Spec.Unschedulable, "%s cordoned", n)
	}
}

// A node Kubernetes does not know has nothing to drain.
func TestDrainOfAnUnknownNode(t *testing.T) {
	var out strings.Builder
	if err := Drain(context.Background(), fake.NewClientset(), "w-9", time.Second, &out); err != nil {
		t.Fatal(err)
	}
}
