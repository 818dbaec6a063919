//go:build tools

// Package tools pins CoreDNS at the release Talos v1.13.9 deploys
// (pkg/machinery constants.DefaultCoreDNSVersion = "v1.14.6"), built into
// .tools/bin by scripts/tools.sh: the real-kubelet scenario (tests/kubeapi)
// runs it beside the kubelet as the cluster's DNS, which Vault's raft peers
// need to find each other by name (stacks/vault.go retry_join).
package tools

import _ "github.com/coredns/coredns"
