package gate

// AllowOSDisk is the one exception to the persistent-substrate rule, for
// the explicit recovery `milner up --replace <node> --os-disk`: it drops
// the refusals of the replace of that node's OS volume (logical name
// osVolume) and of its Talos config apply, and keeps every other refusal,
// the node's data volume's included. The exception holds only while the
// node's VM is replaced in the same preview: a lost OS disk is recovered
// with a fresh VM, never swapped under a running one.
func AllowOSDisk(refusals []Refusal, r Report, node, osVolume string) []Refusal {
	vm := false
	for _, c := range r.Delta(Disposable).Replaces {
		vm = vm || c.Node == node
	}
	if !vm {
		return refusals
	}
	allowed := map[string]bool{}
	for _, c := range r.Delta(Persistent).Replaces {
		if c.Type == TypeLibvirtVolume && c.Name == osVolume {
			allowed[c.Name] = true
		}
	}
	for _, c := range r.Delta(Talos).Replaces {
		if c.Type == TypeConfigApply && c.Node == node {
			allowed[c.Name] = true
		}
	}
	var out []Refusal
	for _, f := range refusals {
		if !allowed[f.Resource] {
			out = append(out, f)
		}
	}
	return out
}
