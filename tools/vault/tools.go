//go:build tools

// Package tools pins Vault at the vault chart's appVersion (chart 0.29.1,
// appVersion 1.18.1), built into .tools/bin by scripts/tools.sh for the
// image the real-kubelet scenario serves (tests/kubeapi): no image can be
// pulled here, so the scenario assembles hashicorp/vault:1.18.1 from this
// binary and the entrypoint script of the same module
// (.release/docker/docker-entrypoint.sh).
package tools

import _ "github.com/hashicorp/vault"
