package config

// Namespaces and workloads (issue #33): the workloads' namespace follows
// the apps' rules, its limits must not contradict each other, and a
// dedication must leave somewhere for everything else (and for the
// workloads themselves) to run.

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/milner/milner/components/vocab"
)

// isSystemNamespace reports one of Kubernetes' own namespaces, or any
// under the kube- prefix Kubernetes reserves for its system namespaces
// (kubernetes.io/docs/concepts/overview/working-with-objects/namespaces:
// "Avoid creating namespaces with the prefix kube-").
func isSystemNamespace(ns string) bool {
	return slices.Contains(systemNamespaces, ns) || strings.HasPrefix(ns, "kube-")
}

// checkNamespace is the namespace rule apps and the workloads share: no
// system namespace, and the privileged level only with its
// acknowledgement.
func checkNamespace(p *problems, at, ns string, level vocab.PodSecurityLevel, ack bool, example string) {
	if isSystemNamespace(ns) {
		p.addf(at+".namespace", "%q is a Kubernetes system namespace; give it one of its own (e.g. %q)", ns, example)
	}
	if level == vocab.Privileged && !ack {
		p.addf(at+".podSecurity", "privileged admits pods that own their node (host paths, host network, privileged containers); use baseline or restricted, or set %s.privilegedAcknowledged: true to accept it", at)
	}
}

// ownedNamespaces maps every namespace the stack gives a layer (storage,
// apps, workloads) to the config path that claims it.
func (c *Config) ownedNamespaces() map[string]string {
	out := map[string]string{}
	if c.Storage.On() {
		out[c.Storage.Namespace] = Key("storage")
	}
	for i, a := range c.Apps {
		out[a.Namespace] = fmt.Sprintf("%s[%d]", Key("apps"), i)
	}
	if w := c.Workloads; w != nil {
		out[w.Namespace] = Key("workloads")
	}
	return out
}

// checkWorkloadsRules is the workloads rule: namespace, limits, dedication.
func (c *Config) checkWorkloadsRules(p *problems) {
	for i, a := range c.Apps {
		checkNamespace(p, fmt.Sprintf("%s[%d]", Key("apps"), i), a.Namespace, a.PodSecurity, a.PrivilegedAcknowledged, a.Name)
	}
	w := c.Workloads
	if w == nil {
		return
	}
	wp := Key("workloads")
	checkNamespace(p, wp, w.Namespace, w.PodSecurity, w.PrivilegedAcknowledged, DefaultWorkloadsName)
	checkWorkloadLimits(p, wp, w)
	c.checkDedication(p, wp, w)
}

// checkWorkloadLimits refuses limits that contradict each other, compared
// as Kubernetes compares quantities (2000m is 2; 1G is less than 1Gi): the
// API server refuses a LimitRange whose default request exceeds its
// default limit or whose default exceeds its max (pkg/apis/core/validation
// ValidateLimitRange), and a quota whose requests exceed its limits, or
// that is smaller than one container's default, admits no pod.
func checkWorkloadLimits(p *problems, wp string, w *WorkloadsConfig) {
	q := func(m map[string]string, k string) (resource.Quantity, bool) {
		v, ok := m[k]
		if !ok {
			return resource.Quantity{}, false
		}
		parsed, err := resource.ParseQuantity(v)
		return parsed, err == nil
	}
	type pair struct {
		lowField, highField string
		low, high           map[string]string
		lowKey, highKey     string
		why                 string
	}
	var pairs []pair
	for _, r := range []string{"cpu", "memory"} {
		pairs = append(pairs,
			pair{"defaultRequest", "defaultLimit", w.DefaultRequest, w.DefaultLimit, r, r, "a container's default request above its default limit (the API server refuses the LimitRange)"},
			pair{"defaultLimit", "max", w.DefaultLimit, w.Max, r, r, "a default limit above the maximum (the API server refuses the LimitRange)"},
			pair{"defaultRequest", "max", w.DefaultRequest, w.Max, r, r, "a default request above the maximum (the API server refuses the LimitRange)"},
			pair{"quota", "quota", w.Quota, w.Quota, "requests." + r, "limits." + r, "requests above limits: every pod's limit is at least its request, so the quota's requests can never be used"},
			pair{"defaultRequest", "quota", w.DefaultRequest, w.Quota, r, "requests." + r, "one container's default request above the whole quota: no pod is admitted"},
			pair{"defaultLimit", "quota", w.DefaultLimit, w.Quota, r, "limits." + r, "one container's default limit above the whole quota: no pod is admitted"},
		)
	}
	for _, pr := range pairs {
		lo, ok1 := q(pr.low, pr.lowKey)
		hi, ok2 := q(pr.high, pr.highKey)
		if ok1 && ok2 && lo.Cmp(hi) > 0 {
			p.addf(fmt.Sprintf("%s.%s[%s]", wp, pr.lowField, pr.lowKey), "%s is more than %s.%s[%s] %s: %s", pr.low[pr.lowKey], wp, pr.highField, pr.highKey, pr.high[pr.highKey], pr.why)
		}
	}
}

// checkDedication refuses a dedication that leaves nothing schedulable:
// a node listed twice, a dedicated control plane that takes no pods at all
// (the workloads could never run on it), and no node left for the apps.
func (c *Config) checkDedication(p *problems, wp string, w *WorkloadsConfig) {
	if len(w.DedicatedNodes) == 0 || c.StartAt == LayerApps {
		return
	}
	seen := map[string]int{}
	for i, n := range w.DedicatedNodes {
		at := fmt.Sprintf("%s.dedicatedNodes[%d]", wp, i)
		if j, dup := seen[n]; dup {
			p.addf(at, "%q is also dedicatedNodes[%d]", n, j)
			continue
		}
		seen[n] = i
		k := slices.IndexFunc(c.Nodes, func(node NodeConfig) bool { return node.Name == n })
		if k >= 0 && !c.takesPods(c.Nodes[k]) {
			p.addf(at, "%q is a control plane that takes no pods (cluster.allowSchedulingOnControlPlanes is false): the workloads could never run there", n)
		}
	}
	if c.schedulableNodes() == 0 && len(c.Nodes) > 0 {
		p.addf(wp+".dedicatedNodes", "leaves no node for anything else: Vault, Woodpecker and storage would have nowhere to run; keep at least one node that takes pods out of the dedication")
	}
}

// takesPods reports whether pods can run on a node: a worker, or a control
// plane that allows scheduling.
func (c *Config) takesPods(n NodeConfig) bool {
	allow := c.Cluster.AllowSchedulingOnControlPlanes
	return n.Role == vocab.RoleWorker || n.Role == vocab.RoleControlPlane && allow != nil && *allow
}
