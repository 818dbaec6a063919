//go:build tools

// Package tools pins kube-apiserver (k8s.io/kubernetes), built into .tools/bin
// by scripts/tools.sh for the real-API tests (tests/kubeapi).
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
