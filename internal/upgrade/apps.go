package upgrade

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/milner/milner/stacks/config"
)

// Apps is the app-aware part of the rolling gate: between nodes, every
// StatefulSet and Deployment of the apps layer must be fully Ready again.
// Talos' health (Healthy) knows nothing of them: a rebooted node's Vault
// pod comes back sealed, and the chart's PodDisruptionBudget (one
// unavailable) would make Talos' drain of the next node wait out its
// timeout and reboot anyway, leaving two of three raft peers sealed.
type Apps struct {
	client kubernetes.Interface
	// namespaces are the apps layer's: every milner:apps release's and the
	// storage provisioner's (milner:workloads only reserves capacity for
	// workloads Milner does not deploy).
	namespaces []string
}

// NewApps returns the apps gate of a stack's apps layer, asked through the
// stack's admin kubeconfig.
func NewApps(cfg *config.Config, kubeconfig []byte) (*Apps, error) {
	a := &Apps{}
	if cfg.Storage.On() {
		a.namespaces = append(a.namespaces, cfg.Storage.Namespace)
	}
	for _, app := range cfg.Apps {
		a.namespaces = append(a.namespaces, app.Namespace)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if a.client, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	slices.Sort(a.namespaces)
	a.namespaces = slices.Compact(a.namespaces)
	return a, nil
}

// Ready returns nil when every StatefulSet and Deployment of the apps
// layer has all its replicas Ready, observed at its current generation;
// otherwise a *NotReadyError naming each workload that is not and why, by
// pod.
//
// The replica counts are the controllers' own (the StatefulSet and
// Deployment controllers count the Pods whose Ready condition is true), so
// a Vault pod counts only once it is unsealed: the vault-helm chart's
// readinessProbe at the pinned v0.29.1 (templates/server-statefulset.yaml)
// is `vault status -tls-skip-verify`, whose exit code is 2 while sealed.
// A nil *Apps (no apps layer) is always ready.
func (a *Apps) Ready(ctx context.Context) error { return a.ReadyBesides(ctx, nil) }

// ReadyBesides is Ready, excusing the Pods bound to the given nodes: the
// gate before a replace, whose own node may be dead (its Pods with it), but
// whose every other Pod must be Ready, or the replace takes a second peer
// down.
func (a *Apps) ReadyBesides(ctx context.Context, nodes []string) error {
	if a == nil {
		return nil
	}
	var problems []string
	for _, ns := range a.namespaces {
		sets, err := a.client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("apps: list statefulsets in %s: %w", ns, err)
		}
		for _, s := range sets.Items {
			want := ptr.Deref(s.Spec.Replicas, 1) // the API server defaults it to 1
			if s.Status.ObservedGeneration >= s.Generation && s.Status.ReadyReplicas == want && s.Status.Replicas == want {
				continue
			}
			if p := a.notReady(ctx, "statefulset", ns, s.Name, s.Spec.Selector, s.Status.ReadyReplicas, want, nodes); p != "" {
				problems = append(problems, p)
			}
		}
		deps, err := a.client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("apps: list deployments in %s: %w", ns, err)
		}
		for _, d := range deps.Items {
			want := ptr.Deref(d.Spec.Replicas, 1)
			st := d.Status
			// As `kubectl rollout status` waits: every replica updated,
			// available, and no old one left.
			if st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.ReadyReplicas == want && st.AvailableReplicas == want && st.Replicas == want {
				continue
			}
			if p := a.notReady(ctx, "deployment", ns, d.Name, d.Spec.Selector, min(st.ReadyReplicas, st.AvailableReplicas, st.UpdatedReplicas), want, nodes); p != "" {
				problems = append(problems, p)
			}
		}
	}
	if len(problems) > 0 {
		return &NotReadyError{Problems: problems}
	}
	return nil
}

// NotReadyError is the apps gate's answer when it could ask: the workloads
// that are not Ready, each with why (any other error means the API could
// not be asked).
type NotReadyError struct{ Problems []string }

func (e *NotReadyError) Error() string { return "apps not ready: " + strings.Join(e.Problems, "; ") }

// Wait waits, up to o.AppsTimeout, for Ready: after a node came back (its
// pods restart).
func (a *Apps) Wait(ctx context.Context, o Options) error {
	return waitFor(ctx, o, o.AppsTimeout, func() error { return a.Ready(ctx) })
}

// notReady says why one workload is not ready: its count and each of its
// pods that is not Ready; "" when every missing replica is a Pod not
// Ready on one of the excused nodes.
func (a *Apps) notReady(ctx context.Context, kind, ns, name string, selector *metav1.LabelSelector, ready, want int32, excused []string) string {
	msg := fmt.Sprintf("%s %s/%s has %d/%d replicas ready", kind, ns, name, ready, want)
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return msg
	}
	pods, err := a.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return fmt.Sprintf("%s (pods: %v)", msg, err)
	}
	var why []string
	for _, p := range pods.Items {
		w := podNotReady(&p)
		switch {
		case w == "":
		case slices.Contains(excused, p.Spec.NodeName):
			ready++ // on a node being replaced: its absence is the point
		default:
			why = append(why, w)
		}
	}
	switch {
	case len(excused) > 0 && ready >= want && len(why) == 0:
		return ""
	case len(why) == 0:
		return msg
	}
	return msg + ": " + strings.Join(why, ", ")
}

// podNotReady says why a pod is not Ready ("" when it is).
func podNotReady(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return ""
		}
	}
	running := len(p.Status.ContainerStatuses) > 0
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			running = false
		}
	}
	// A Vault server pod (as vault-helm labels it) whose container runs but
	// is not Ready fails the chart's `vault status` probe: it is sealed (or
	// not initialised).
	if running && p.Labels["app.kubernetes.io/name"] == "vault" && p.Labels["component"] == "server" {
		return fmt.Sprintf("%s is sealed: run `milner vault unseal` (docs/runbooks/vault.md)", p.Name)
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			return fmt.Sprintf("%s is not Ready (%s: %s)", p.Name, c.Name, w.Reason)
		}
	}
	return fmt.Sprintf("%s is not Ready (phase %s)", p.Name, p.Status.Phase)
}
