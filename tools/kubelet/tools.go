//go:build tools

// Package tools pins the node side of the real-kubelet apps scenario
// (tests/kubeapi TestAppsRunOnARealKubelet): kubelet, kube-scheduler and
// kube-proxy from k8s.io/kubernetes, the same release as
// tools/kube-apiserver, built into .tools/bin by scripts/tools.sh.
//
//   - A real kubelet: how far it got. `scripts/tools.sh kubelet` builds
//     kubelet, kube-scheduler and kube-proxy from `k8s.io/kubernetes` v1.36.3
//     (`tools/kubelet`, the API server's release; 43 s, 10 s and 29 s warm on
//     this machine after kube-apiserver's build). kubelet v1.36.3 refuses this
//     machine's cgroup v1 by default: "kubelet is configured to not run on a
//     host using cgroup v1" (`pkg/kubelet/apis/config/validation/validation_linux.go`
//     line 35; `failCgroupV1` defaults to true, `v1beta1/defaults.go` lines
//     293-294); the KubeletConfiguration field `failCgroupV1: false` is the
//     fix, no older kubelet needed. Debian's containerd 1.6.20 does not answer
//     the CRI `RuntimeConfig` call; kubelet v1.36.3 falls back to its own
//     `cgroupDriver` on `Unimplemented` (`cmd/kubelet/app/server.go`
//     `getCgroupDriverFromCRI`, lines 1401-1427). The scenario
//     (TestAppsRunOnARealKubelet, `make runtime`) runs the storage layer's
//     and a test app's pods on it (docs/verification.md).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
