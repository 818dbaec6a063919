//go:build tools

// Package tools pins MetalLB at its chart's appVersion (chart 0.16.1,
// appVersion v0.16.1), built into .tools/bin by scripts/tools.sh for the
// images the real-kubelet scenario serves (tests/kubeapi): no image can be
// pulled here, so the scenario assembles quay.io/metallb/controller:v0.16.1
// and quay.io/metallb/speaker:v0.16.1 from these two binaries.
package tools

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)
