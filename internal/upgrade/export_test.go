package upgrade

import "k8s.io/client-go/kubernetes"

// SetKubernetes has c reach cs as the cluster's Kubernetes API (a test's
// fake) instead of through a control plane's admin kubeconfig.
func SetKubernetes(c *Cluster, cs kubernetes.Interface) { c.kubernetes = cs }
