//go:build tools

// Package tools pins local-path-provisioner at its chart's appVersion
// (chart 0.0.33, appVersion v0.0.33), built into .tools/bin by
// scripts/tools.sh for the image the real-kubelet scenario serves
// (tests/kubeapi node_test.go): no image can be pulled here, so the
// scenario assembles rancher/local-path-provisioner:v0.0.33 from this binary.
package tools

import _ "github.com/rancher/local-path-provisioner"
