package config

import (
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
)

// checkKubernetesSupported refuses a Kubernetes version the declared Talos
// does not support, by machinery's own tables (compatibility
// KubernetesVersion.SupportedWith: talos19 allows 1.27.0 up to 1.32.x),
// the check talosctl upgrade-k8s and `milner upgrade` make. A Talos minor
// this machinery does not know is refused too: its range is not known
// here. Both versions are exact (validateCluster checked them).
func checkKubernetesSupported(p *problems, at, talos, kube string) {
	tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talos})
	if err != nil {
		p.addf(at, "talosVersion %s: %v", talos, err)
		return
	}
	kv, err := compatibility.ParseKubernetesVersion(strings.TrimPrefix(kube, "v"))
	if err != nil {
		p.addf(at, "%s: %v", kube, err)
		return
	}
	if err := kv.SupportedWith(tv); err != nil {
		p.addf(at, "%s is outside what talosVersion %s supports: %v", kube, talos, err)
	}
}
