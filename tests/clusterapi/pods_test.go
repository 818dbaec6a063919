package clusterapi

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The played kubelet stops a deleted pod after its longest preStop sleep,
// at most its deletion grace period, in PodSecond units; a pod without a
// preStop sleep at once.
func TestTerminatedTakesThePreStopWithinTheGrace(t *testing.T) {
	sleep := func(s int64) corev1.Container {
		return corev1.Container{Name: "c", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}}}
	}
	pod := func(grace *int64, cs ...corev1.Container) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: grace}, Spec: corev1.PodSpec{Containers: cs}}
	}
	for name, tc := range map[string]struct {
		pod  corev1.Pod
		want time.Duration
	}{
		"no hook":                  {pod(ptr.To[int64](60), corev1.Container{Name: "c"}), 0},
		"the sleep":                {pod(ptr.To[int64](60), sleep(20)), 2 * time.Second},
		"the longest, in parallel": {pod(ptr.To[int64](60), sleep(5), sleep(20)), 2 * time.Second},
		"cut at the grace period":  {pod(ptr.To[int64](10), sleep(20)), time.Second},
		"no grace recorded":        {pod(nil, sleep(20)), 2 * time.Second},
	} {
		if got := terminated(tc.pod, 100*time.Millisecond); got != tc.want {
			t.Errorf("%s: %s, want %s", name, got, tc.want)
		}
	}
}

// A preferred term matches a node by its labels; an operator the played
// scheduler does not play matches nothing.
func TestMatchesPreferredTerm(t *testing.T) {
	node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-2", Labels: map[string]string{"kubernetes.io/hostname": "cp-2"}}}
	term := func(op corev1.NodeSelectorOperator, v ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: op, Values: v}}}
	}
	for _, tc := range []struct {
		term corev1.NodeSelectorTerm
		want bool
	}{
		{term(corev1.NodeSelectorOpIn, "cp-2"), true},
		{term(corev1.NodeSelectorOpIn, "cp-1"), false},
		{term(corev1.NodeSelectorOpNotIn, "cp-1"), true},
		{term(corev1.NodeSelectorOpExists), true},
		{term(corev1.NodeSelectorOpGt, "1"), false},
		{corev1.NodeSelectorTerm{}, false},
	} {
		if got := matches(tc.term, node); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.term, got, tc.want)
		}
	}
}
