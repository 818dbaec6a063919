package upgrade

import (
	"errors"
	"fmt"
	"strings"
)

// Version changes belong to `milner upgrade`, not to `milner up`.
//
// `milner up` applies each node's machine config with
// staged_if_needing_reboot, and Talos applies a changed .cluster (the
// kube-apiserver, controller-manager, scheduler and kube-proxy images),
// .machine.kubelet (the kubelet image) and .machine.install (the installer
// image) immediately, without a reboot (talos v1.11.5
// internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go,
// CanApplyImmediate). So an up that carried a Kubernetes version bump
// would restart every kubelet and every control plane's static pods with
// the new images in one go: no wait for each control plane's pods, no
// kube-proxy or CoreDNS update, none of upgrade-k8s's sequencing. And a
// changed installer image upgrades nothing on a running node: only the
// Upgrade API does (the Upgrade handler,
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
// installs the image it is passed and never writes the machine config).
//
// The interlock: while a node runs other versions than the stack declares,
// `milner up` refuses any change to the Talos machine configs and points
// to `milner upgrade`. Upgrade moves the versions node by node; what it
// leaves on each node is the config the bumped stack renders (upgrade-k8s
// patches exactly the images the generator writes, and the installer
// reference is the one difference, applied live and inert), so the next up
// only records it, and the one after plans no change.

// Lagging lists the reachable nodes that run other Talos or Kubernetes
// versions than declared, one line each, in config order. Unreachable
// nodes are not listed: what they run is unknown.
func Lagging(d Declared, rows []Row) []string {
	var out []string
	for _, r := range rows {
		if r.Err != "" {
			continue
		}
		var diffs []string
		if r.Talos != d.TalosVersion {
			diffs = append(diffs, fmt.Sprintf("Talos %s (declared %s)", r.Talos, d.TalosVersion))
		}
		if r.Kubelet != d.KubernetesVersion {
			diffs = append(diffs, fmt.Sprintf("kubelet %s (declared %s)", r.Kubelet, d.KubernetesVersion))
		}
		if r.APIServer != "" && r.APIServer != d.KubernetesVersion {
			diffs = append(diffs, fmt.Sprintf("kube-apiserver %s (declared %s)", r.APIServer, d.KubernetesVersion))
		}
		if len(diffs) > 0 {
			out = append(out, fmt.Sprintf("node %q runs %s", r.Node.Name, strings.Join(diffs, ", ")))
		}
	}
	return out
}

// ErrVersionsLag is the refusal of an up whose Talos config changes would
// move versions that `milner upgrade` must move.
var ErrVersionsLag = errors.New("nodes run other versions than the stack declares")

// CheckUp refuses a `milner up` that changes Talos machine configs while a
// reachable node runs other versions than declared (see the interlock
// above). talosChanged says whether the up's delta touches a Talos config;
// without one nothing would move, and the up may go on.
func CheckUp(d Declared, rows []Row, talosChanged bool) error {
	lag := Lagging(d, rows)
	if !talosChanged || len(lag) == 0 {
		return nil
	}
	return fmt.Errorf("%w (%s): this up would push them to every node at once, so it changes no Talos config until `milner upgrade` has moved them one node at a time; run `milner upgrade` first, then `milner up`",
		ErrVersionsLag, strings.Join(lag, "; "))
}
