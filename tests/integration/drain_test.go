//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/milner/milner/tests/talosapi"
)

// webPreStop is the preStop sleep of the web workload's container, in
// seconds: the time a Service's pod commonly gives its endpoints' removal
// to reach every proxy and load balancer before its SIGTERM (a figure
// for the test, not a Kubernetes default). The played kubelet takes it
// in KubeletTiming.PodSecond units: 20 s with MILNER_DOUBLE_TIMING=real,
// 2 s in CI.
const webPreStop = 20

// kube is a client of the scenario's API server.
func (s *talosLayer) kube() kubernetes.Interface {
	s.t.Helper()
	cs, err := s.clusterAPI().Clientset()
	if err != nil {
		s.t.Fatal(err)
	}
	return cs
}

// webOn runs the workload a drain moves: ReplicaSet default/web, one pod
// that prefers node (the played scheduler puts it there) and stops after
// its preStop sleep (webPreStop); it returns the pod once it runs on node,
// and a func that deletes the ReplicaSet (its pod goes with it, through
// the garbage collector).
func (s *talosLayer) webOn(ctx context.Context, cs kubernetes.Interface, node string) (corev1.Pod, func()) {
	t := s.t
	t.Helper()
	// The ServiceAccount controller's part: the namespace's default
	// account, which the pod's admission asks for.
	_, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: appsv1.ReplicaSetSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}},
			}}}},
			Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10",
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: webPreStop}}}}},
		}},
	}}
	if _, err := cs.AppsV1().ReplicaSets("default").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	remove := func() {
		bg := metav1.DeletePropagationBackground
		if err := cs.AppsV1().ReplicaSets("default").Delete(context.WithoutCancel(ctx), "web", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Errorf("delete the web ReplicaSet: %v", err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err == nil && len(pods.Items) == 1 && ready(pods.Items[0]) {
			if p := pods.Items[0]; p.Spec.NodeName == node {
				return p, remove
			}
			remove()
			t.Fatalf("the web pod runs on %s, want %s", pods.Items[0].Spec.NodeName, node)
		}
		if time.Now().After(deadline) {
			remove()
			t.Fatalf("the web pod is not Running on %s after 30 s: %v %v", node, pods, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ready reports a Running pod whose Ready condition is True.
func ready(p corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

// podEvent is one change of a pod the API server's watch sent, and when
// it arrived.
type podEvent struct {
	At   time.Time
	Type watch.EventType
	Pod  corev1.Pod
}

// String is one event, for a log line.
func (e podEvent) String() string {
	deleting := ""
	if e.Pod.DeletionTimestamp != nil {
		deleting = " deleting"
	}
	return fmt.Sprintf("%s %s %s uid %s node %q phase %s ready %v%s", e.At.Format(time.StampMilli), e.Type, e.Pod.Name,
		e.Pod.UID, e.Pod.Spec.NodeName, e.Pod.Status.Phase, ready(e.Pod), deleting)
}

// watchPods watches the pods of namespace ns from now on; the returned
// func ends the watch and returns what it saw.
func (s *talosLayer) watchPods(ctx context.Context, cs kubernetes.Interface, ns string) func() []podEvent {
	s.t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		s.t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []podEvent
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				mu.Lock()
				seen = append(seen, podEvent{At: time.Now(), Type: ev.Type, Pod: *p})
				mu.Unlock()
			}
		}
	}()
	return func() []podEvent {
		w.Stop()
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// vmReplacedAt watches domain dom, whose uuid is was, every 200 ms; the
// returned func ends the watch and says when the domain was first gone or
// another one (the engine deleted the VM), zero if never.
func vmReplacedAt(dom, was string) func() time.Time {
	done, ended := make(chan struct{}), make(chan struct{})
	var at time.Time
	go func() {
		defer close(ended)
		for at.IsZero() {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if out, err := exec.Command("virsh", "-c", uri, "domuuid", dom).Output(); err != nil || strings.TrimSpace(string(out)) != was {
				at = time.Now()
			}
		}
	}()
	return func() time.Time {
		close(done)
		<-ended
		return at
	}
}

// podUIDs is every pod of the cluster, by UID.
func (s *talosLayer) podUIDs(ctx context.Context, cs kubernetes.Interface) map[types.UID]string {
	s.t.Helper()
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[types.UID]string{}
	for _, p := range pods.Items {
		out[p.UID] = p.Namespace + "/" + p.Name
	}
	return out
}

// drainedBeforeDown checks what a user relies on when node, running pod
// web of a ReplicaSet, is shut down for its replace: Talos drained it
// between the Shutdown call and the power-off (the double's journal: j),
// and the engine deleted its VM (at vmGone) only after both,
// the drain took the pod's graceful termination (its preStop sleep,
// scaled by second), the pod was evicted and gone, and its replacement
// Ready on another node, before the node went down (the API server's
// watch: evs), no other pod recreated (before: the cluster's pods before
// the replace), and the node schedulable again once back (Talos
// uncordons what it cordoned).
func (s *talosLayer) drainedBeforeDown(ctx context.Context, cs kubernetes.Interface, j talosapi.Journal, evs []podEvent, vmGone time.Time, node string, web corev1.Pod, before map[types.UID]string, second time.Duration) {
	t := s.t
	t.Helper()
	for _, e := range evs {
		t.Logf("pod event: %s", e)
	}
	on := j.On(node)
	calls, drain, drained, down := on.Calls("Shutdown"), on.Events("drain"), on.Events("drained"), on.Events("shutdown")
	if len(calls) != 1 || len(drain) != 1 || len(drained) != 1 || len(down) != 1 {
		t.Fatalf("%s: want one Shutdown, one drain, one power-off; got Shutdown %d, drain %d, drained %d, shutdown %d", node, len(calls), len(drain), len(drained), len(down))
	}
	if drained[0].Detail != "" {
		t.Errorf("%s's drain failed: %s", node, drained[0].Detail)
	}
	var evicted, gone time.Time
	var repl *podEvent
	for i, e := range evs {
		switch {
		case e.Pod.UID == web.UID && e.Pod.DeletionTimestamp != nil && evicted.IsZero():
			evicted = e.At
		case e.Pod.UID == web.UID && e.Type == watch.Deleted:
			gone = e.At
		case e.Pod.UID != web.UID && e.Type != watch.Deleted && e.Pod.Spec.NodeName != "" && ready(e.Pod) && repl == nil:
			repl = &evs[i]
		}
	}
	// The watch's events arrive a moment after the API server wrote them,
	// which the double and the played kubelet read directly: slack.
	hold, slack := webPreStop*second, 200*time.Millisecond
	t.Logf("%s: Shutdown sent %s; drain %s to %s (%s); web evicted %s, gone %s (%s later); replacement %s; powered off %s; VM deleted %s",
		node, calls[0].Time.Format(time.StampMilli), drain[0].Time.Format(time.StampMilli), drained[0].Time.Format(time.StampMilli),
		drained[0].Time.Sub(drain[0].Time).Round(10*time.Millisecond), evicted.Format(time.StampMilli), gone.Format(time.StampMilli),
		gone.Sub(evicted).Round(10*time.Millisecond), repl, down[0].Time.Format(time.StampMilli), vmGone.Format(time.StampMilli))
	if vmGone.IsZero() || !vmGone.After(drained[0].Time) || !vmGone.After(down[0].Time) {
		t.Errorf("%s's VM was deleted (%s) before its drain ended (%s) or it powered off (%s)", node, vmGone.Format(time.StampMilli),
			drained[0].Time.Format(time.StampMilli), down[0].Time.Format(time.StampMilli))
	}
	switch {
	case evicted.IsZero() || gone.IsZero():
		t.Errorf("the web pod on %s was not evicted and gone (evicted %v, gone %v)", node, evicted, gone)
	case !calls[0].Time.Before(drain[0].Time) || !drain[0].Time.Before(evicted) || gone.After(drained[0].Time.Add(slack)) || !drained[0].Time.Before(down[0].Time):
		t.Errorf("%s: want Shutdown, drain, the eviction, the pod gone, the drain's end, the power-off in that order", node)
	case gone.Sub(evicted) < hold-slack || drained[0].Time.Sub(drain[0].Time) < hold:
		t.Errorf("%s's drain did not wait for the pod's graceful termination (%s): the pod went %s after its eviction, the drain took %s",
			node, hold, gone.Sub(evicted), drained[0].Time.Sub(drain[0].Time))
	}
	switch {
	case repl == nil:
		t.Errorf("no replacement of the web pod ran")
	case repl.Pod.Spec.NodeName == node || !repl.At.Before(down[0].Time):
		t.Errorf("the web pod's replacement ran on %s at %s, want another node than %s before its power-off (%s)", repl.Pod.Spec.NodeName,
			repl.At.Format(time.StampMilli), node, down[0].Time.Format(time.StampMilli))
	default:
		want := maps.Clone(before)
		delete(want, web.UID)
		want[repl.Pod.UID] = repl.Pod.Namespace + "/" + repl.Pod.Name
		if got := s.podUIDs(ctx, cs); !maps.Equal(got, want) {
			t.Errorf("pods after the replace: %v, want %v (the web pod's replacement alone new)", got, want)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil && !n.Spec.Unschedulable {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s is still cordoned 10 s after the replace (%v): Talos uncordons what it cordoned once back", node, err)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}
