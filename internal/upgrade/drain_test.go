package upgrade

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
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

// A node Kubernetes does not know has nothing to drain.
func TestDrainOfAnUnknownNode(t *testing.T) {
	var out strings.Builder
	if err := Drain(context.Background(), fake.NewClientset(), "w-9", time.Second, &out); err != nil {
		t.Fatal(err)
	}
}
