package stacks

import (
	"encoding/json"

	"github.com/milner/milner/stacks/config"
)

// extraPatches returns, per node name, the Talos patches the apps layer
// needs of the machines, in a stable order: the storage layer's kubelet
// mount (every node), scheduling on control planes when the cluster has no
// worker (else no app pod could run), and the labels and taint of the
// workloads' dedicated nodes. They are derived from config alone, so
// moving milner:stopAfter between talos and apps changes no machine config.
func extraPatches(c *config.Config) (map[string][]string, error) {
	out := map[string][]string{}
	var all []string
	if c.Storage.On() {
		p, err := storagePatch(c.Storage.Path)
		if err != nil {
			return nil, err
		}
		all = append(all, p)
	}
	dedicated := map[string]bool{}
	var dedicatedPatch string
	if w := c.Workloads; w != nil && len(w.DedicatedNodes) > 0 {
		for _, n := range w.DedicatedNodes {
			dedicated[n] = true
		}
		// machine.nodeLabels and machine.nodeTaints (Talos machine config
		// reference, v1alpha1 MachineConfig): Talos applies both to its
		// Node object. A taint value is "<value>:<effect>".
		b, err := json.Marshal(map[string]any{"machine": map[string]any{
			"nodeLabels": map[string]string{config.DedicatedKey: w.Namespace},
			"nodeTaints": map[string]string{config.DedicatedKey: w.Namespace + ":NoSchedule"},
		}})
		if err != nil {
			return nil, err
		}
		dedicatedPatch = string(b)
	}
	for _, n := range c.Nodes {
		patches := append([]string(nil), all...)
		if dedicated[n.Name] {
			patches = append(patches, dedicatedPatch)
		}
		out[n.Name] = patches
	}
	return out, nil
}
