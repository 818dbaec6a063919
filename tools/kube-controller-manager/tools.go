//go:build tools

// Package tools pins kube-controller-manager (k8s.io/kubernetes, the same
// release as tools/kube-apiserver), built into .tools/bin by scripts/tools.sh
// for the real-API tests (tests/kubeapi): its StatefulSet, Deployment and
// ReplicaSet controllers create the Pods and PersistentVolumeClaims the real
// charts declare.
package tools

import _ "k8s.io/kubernetes/cmd/kube-controller-manager"
