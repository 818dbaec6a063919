package clusterapi

import (
	"cmp"
	"net/http"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Clientset is a client of the cluster's API server as the seeding admin:
// what a scenario hands its Talos doubles for their drain (talosapi
// Cluster.SetKubernetes), where Talos drains with the kubelet's
// kubeconfig, and what a test reads the cluster with.
func (a *API) Clientset() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(&rest.Config{Host: a.url, TLSClientConfig: rest.TLSClientConfig{CAData: a.ca, CertData: a.admin, KeyData: a.adminKey}})
}

// schedule is the scheduler's part for pod p, which no node was chosen
// for: it binds p to one of nodes (pods: every pod in the cluster). The
// played scheduler keeps three of kube-scheduler's default plugins
// (k8s.io/kubernetes v1.36.3 pkg/scheduler/framework/plugins): a cordoned
// node takes no pod (NodeUnschedulable; a toleration of it is not
// played); the nodes that match more of the pod's preferred node
// affinity weight come first (NodeAffinity's score); then the node with
// the fewest pods (the spreading of NodeResourcesFit's least-allocated
// score, for pods that request nothing), then by name. Taints, required
// affinity and resources are not played: the pods a scenario schedules
// need none.
func (a *API) schedule(p corev1.Pod, nodes []corev1.Node, pods []corev1.Pod) {
	count := map[string]int{}
	for _, q := range pods {
		count[q.Spec.NodeName]++
	}
	var preferred []corev1.PreferredSchedulingTerm
	if aff := p.Spec.Affinity; aff != nil && aff.NodeAffinity != nil {
		preferred = aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	}
	score := func(n corev1.Node) int32 {
		var s int32
		for _, t := range preferred {
			if matches(t.Preference, n) {
				s += t.Weight
			}
		}
		return s
	}
	var fit []corev1.Node
	for _, n := range nodes {
		if !n.Spec.Unschedulable {
			fit = append(fit, n)
		}
	}
	if len(fit) == 0 {
		return // Pending until a node takes it
	}
	best := slices.MinFunc(fit, func(x, y corev1.Node) int {
		return cmp.Or(cmp.Compare(score(y), score(x)), cmp.Compare(count[x.Name], count[y.Name]), cmp.Compare(x.Name, y.Name))
	})
	_ = a.send(http.MethodPost, "/api/v1/namespaces/"+p.Namespace+"/pods/"+p.Name+"/binding", "", map[string]any{
		"apiVersion": "v1", "kind": "Binding", "metadata": map[string]any{"name": p.Name, "uid": p.UID},
		"target": map[string]any{"apiVersion": "v1", "kind": "Node", "name": best.Name},
	})
}

// matches reports whether node n's labels meet every expression of term
// (In, NotIn, Exists, DoesNotExist; Gt, Lt and matchFields are not
// played, and a term that uses them matches nothing).
func matches(term corev1.NodeSelectorTerm, n corev1.Node) bool {
	if len(term.MatchFields) > 0 || len(term.MatchExpressions) == 0 {
		return false
	}
	ops := map[corev1.NodeSelectorOperator]selection.Operator{corev1.NodeSelectorOpIn: selection.In, corev1.NodeSelectorOpNotIn: selection.NotIn,
		corev1.NodeSelectorOpExists: selection.Exists, corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist}
	sel := labels.NewSelector()
	for _, e := range term.MatchExpressions {
		op, ok := ops[e.Operator]
		if !ok {
			return false
		}
		r, err := labels.NewRequirement(e.Key, op, e.Values)
		if err != nil {
			return false
		}
		sel = sel.Add(*r)
	}
	return sel.Matches(labels.Set(n.Labels))
}

// start is the kubelet of the node p is bound to starting it: Running on
// the node's address, each container running and ready (a container
// without a readiness probe is ready once it runs: k8s.io/kubernetes
// v1.36.3 pkg/kubelet/prober/prober_manager.go UpdatePodStatus, "no
// readinessProbe -> always ready"), so the pod is Ready.
func (a *API) start(p corev1.Pod, ip netip.Addr) error {
	now := time.Now().UTC().Format(time.RFC3339)
	var statuses []any
	for _, c := range p.Spec.Containers {
		statuses = append(statuses, map[string]any{"name": c.Name, "ready": true, "started": true, "restartCount": 0, "image": c.Image, "imageID": "",
			"state": map[string]any{"running": map[string]any{"startedAt": now}}})
	}
	return a.send(http.MethodPatch, "/api/v1/namespaces/"+p.Namespace+"/pods/"+p.Name+"/status", "application/merge-patch+json", map[string]any{
		"status": map[string]any{"phase": "Running", "startTime": now, "hostIP": ip.String(), "hostIPs": []any{map[string]any{"ip": ip.String()}},
			"conditions": []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": now},
				map[string]any{"type": "ContainersReady", "status": "True", "lastTransitionTime": now}},
			"containerStatuses": statuses},
	})
}

// terminated is how long the kubelet takes to stop a deleted pod p once
// it saw the deletion, in units of second (KubeletTiming.PodSecond). Each
// container runs its preStop hook within the grace period, then is sent
// SIGTERM with what is left of it, 2 s at least (k8s.io/kubernetes v1.36.3
// pkg/kubelet/kuberuntime/kuberuntime_container.go killContainer,
// executePreStopHook), the containers in parallel
// (killContainersWithSyncResult); the grace period is the deletion's
// (deletionGracePeriodSeconds: an eviction's DeleteOptions, else the
// pod's terminationGracePeriodSeconds). The played containers exit at
// their SIGTERM, so a pod takes its longest preStop sleep (the
// lifecycle's sleep action, GA since Kubernetes 1.34), at most the grace
// period; a pod without one is removed at once.
func terminated(p corev1.Pod, second time.Duration) time.Duration {
	var longest int64
	for _, c := range p.Spec.Containers {
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			longest = max(longest, c.Lifecycle.PreStop.Sleep.Seconds)
		}
	}
	if g := p.DeletionGracePeriodSeconds; g != nil {
		longest = min(longest, *g)
	}
	return time.Duration(longest) * second
}
