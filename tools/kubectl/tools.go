//go:build tools

// Package tools pins kubectl, the client the README's quick start and the
// runbooks after it run (`kubectl get nodes`, the Vault runbook's `kubectl
// exec`): k8s.io/kubernetes/cmd/kubectl from the release of
// tools/kube-apiserver (v1.36.3), built into .tools/bin by
// `scripts/tools.sh kubectl`, since a fresh Debian 12 has no kubectl.
package tools

import _ "k8s.io/kubernetes/cmd/kubectl"
