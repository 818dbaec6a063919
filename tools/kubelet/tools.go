//go:build tools

// Package tools pins the node side of the real-kubelet apps scenario
// (tests/kubeapi TestAppsRunOnARealKubelet): kubelet, kube-scheduler and
// kube-proxy from k8s.io/kubernetes, the same release as
// tools/kube-apiserver, built into .tools/bin by scripts/tools.sh.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
