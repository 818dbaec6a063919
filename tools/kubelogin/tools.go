//go:build tools

// Package tools pins kubelogin (github.com/int128/kubelogin), the kubectl
// plugin the kubeconfig of a stack with milner:cluster.oidc runs
// (`kubectl oidc-login get-token`, internal/oidclogin), built into
// .tools/bin as kubectl-oidc_login (the name kubectl looks up for
// `kubectl oidc-login`) by `scripts/tools.sh kubelogin`: no krew needed.
package tools

import _ "github.com/int128/kubelogin"
