package upgrade

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"
)

// defaultDrainTimeout is talosctl's (talos v1.13.9 cmd/talosctl/pkg/talos/
// nodedrain DefaultDrainTimeout) and Talos' own drain phase's.
const defaultDrainTimeout = 5 * time.Minute

// Drain cordons the Kubernetes node and evicts its pods as talosctl does
// before a LifecycleService upgrade (talos v1.13.9 cmd/talosctl/pkg/talos/
// nodedrain CordonAndDrain): kubectl's drain helper, through the eviction
// API so that PodDisruptionBudgets hold, unmanaged pods too (Force),
// DaemonSet pods left (their controller recreates them), emptyDir data
// deleted, each pod's own grace period, within timeout (zero: 5 minutes).
//
// Two differences. kubectl's helper writes why an eviction is refused (the
// eviction API's 429, "Cannot evict pod as it would violate the pod's
// disruption budget") to its ErrOut and retries until its timeout, after
// which its error says only "global timeout reached"; nodedrain discards
// ErrOut. Drain keeps each pod's last refusal and names it in its error,
// so a drain a budget blocks says which pod and why. And a refused
// eviction is asked again every 5 seconds, as kubectl drain does, where
// nodedrain's helper, without a delay, asks again at once.
//
// A node Kubernetes does not know (never registered, or already deleted)
// has nothing to drain.
func Drain(ctx context.Context, cs kubernetes.Interface, node string, timeout time.Duration, out io.Writer) error {
	if timeout == 0 {
		timeout = defaultDrainTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, _ = fmt.Fprintf(out, "%s: no such Kubernetes node: nothing to drain\n", node)
		return nil
	case err != nil:
		return fmt.Errorf("get the Kubernetes node %q: %w", node, err)
	}
	refusals := &evictionRefusals{last: map[string]string{}}
	h := &drain.Helper{
		Ctx:                 ctx,
		Client:              cs,
		Force:               true,
		GracePeriodSeconds:  -1,
		IgnoreAllDaemonSets: true,
		DeleteEmptyDirData:  true,
		Timeout:             timeout,
		// kubectl drain's (kubectl v0.36.3 pkg/cmd/drain/drain.go); the
		// helper's zero would ask again at once, in a loop, for as long as
		// a budget refuses.
		EvictErrorRetryDelay: 5 * time.Second,
		Out:                  io.Discard,
		ErrOut:               refusals,
		OnPodDeletionOrEvictionStarted: func(pod *corev1.Pod, _ bool) {
			_, _ = fmt.Fprintf(out, "%s: evicting pod %s/%s\n", node, pod.Namespace, pod.Name)
		},
		OnPodDeletionOrEvictionFinished: func(pod *corev1.Pod, _ bool, err error) {
			if err == nil {
				_, _ = fmt.Fprintf(out, "%s: evicted pod %s/%s\n", node, pod.Namespace, pod.Name)
			}
		},
	}
	_, _ = fmt.Fprintf(out, "%s: cordon\n", node)
	if err := drain.RunCordonOrUncordon(h, n, true); err != nil {
		return fmt.Errorf("cordon Kubernetes node %q: %w", node, err)
	}
	_, _ = fmt.Fprintf(out, "%s: drain (up to %s)\n", node, timeout)
	if err := drain.RunNodeDrain(h, node); err != nil {
		if why := refusals.String(); why != "" {
			err = fmt.Errorf("%w; the evictions refused: %s", err, why)
		}
		if kept := keptBy(context.WithoutCancel(ctx), cs, node); kept != "" {
			err = fmt.Errorf("%w; %s", err, kept)
		}
		return fmt.Errorf("drain Kubernetes node %q: %w", node, err)
	}
	_, _ = fmt.Fprintf(out, "%s: drained\n", node)
	return nil
}

// keptBy names the pods still on node after a failed drain and each
// PodDisruptionBudget that selects one, with the disruptions it allows.
// client-go retries a 429 that carries Retry-After on its own (rest
// request.go, up to 10 times) before the drain helper sees it, so a short
// drain can end before any refusal reached ErrOut: the budgets are then
// asked directly.
func keptBy(ctx context.Context, cs kubernetes.Interface, node string) string {
	out, _ := budgetsOn(ctx, cs, node, false)
	return strings.Join(out, "; ")
}

// blockedBy names each pod on node a drain would evict that a
// PodDisruptionBudget allowing no disruption now selects, with the
// budget: what an eviction would be refused for.
func blockedBy(ctx context.Context, cs kubernetes.Interface, node string) ([]string, error) {
	return budgetsOn(ctx, cs, node, true)
}

// budgetsOn names each pod on node a drain would evict (not a mirror or
// DaemonSet pod, not terminating) with the PodDisruptionBudgets that
// select it; onlyBlocked: only the budgets that allow no disruption now,
// and only the pods one of them selects.
func budgetsOn(ctx context.Context, cs kubernetes.Interface, node string, onlyBlocked bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods.Items {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror || p.DeletionTimestamp != nil || ownedByDaemonSet(p) {
			continue
		}
		what, kept := fmt.Sprintf("pod %s/%s", p.Namespace, p.Name), false
		if !onlyBlocked {
			what += " is still on the node"
		}
		budgets, err := cs.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
		switch {
		case err != nil && onlyBlocked:
			return nil, err
		case err != nil: // the pod is named without its budgets
			budgets = &policyv1.PodDisruptionBudgetList{}
		}
		for _, b := range budgets.Items {
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err == nil && !sel.Empty() && sel.Matches(labels.Set(p.Labels)) && (!onlyBlocked || b.Status.DisruptionsAllowed < 1) {
				what += fmt.Sprintf(", kept by PodDisruptionBudget %s/%s (disruptions allowed: %d)", b.Namespace, b.Name, b.Status.DisruptionsAllowed)
				kept = true
			}
		}
		if !onlyBlocked || kept {
			out = append(out, what)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ownedByDaemonSet reports a pod a DaemonSet controls (the drain leaves it).
func ownedByDaemonSet(p corev1.Pod) bool {
	c := metav1.GetControllerOf(&p)
	return c != nil && c.Kind == "DaemonSet"
}

// evictionRefusals is the drain helper's ErrOut: the last refusal of each
// pod's eviction, from kubectl v0.36.3 pkg/drain/drain.go evictPods'
// "error when evicting pods/%q -n %q (will retry after %v): %v".
type evictionRefusals struct {
	mu   sync.Mutex
	last map[string]string
}

var refusalLine = regexp.MustCompile(`^error when evicting pods/"([^"]+)" -n "([^"]+)" \(will retry after [^)]*\): (.*)$`)

func (r *evictionRefusals) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		if m := refusalLine.FindStringSubmatch(line); m != nil {
			r.last[m[2]+"/"+m[1]] = m[3]
		}
	}
	return len(p), nil
}

// String names each refused pod and its last refusal, in pod order.
func (r *evictionRefusals) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for pod, why := range r.last {
		out = append(out, fmt.Sprintf("pod %s: %s", pod, why))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
