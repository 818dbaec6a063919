package guard

import (
	"fmt"
	"strconv"

	"github.com/milner/milner/internal/pve"
)

// StateVM is a Proxmox VM as the stack's state records it.
type StateVM struct {
	// ID is the provider's id: bpg's VM id is the PVE VM id.
	ID string
	// Host is the PVE node it was on (the nodeName input).
	Host string
}

// StaleProxmox is Stale for Proxmox VMs, by VM id and host: for each
// declared VM the state records (stateVM returns ok false when absent), a
// live guest of its name carrying another VM id, or on another host, than
// the state records means the state is not the cluster's present (a state
// restored from a backup older than a vmId change or a host move). The VM
// ids are fixed in the stack's config, so a replace alone keeps them: the
// guard compares what a restore can make disagree. A guest carrying the
// state's VM id under another name is not stale: an adoption that stopped
// between its import and its rename looks the same. It refuses before
// anything changes.
func StaleProxmox(stack string, declared []DeclaredVM, stateVM func(logical string) (StateVM, bool), live []pve.VM) []Finding {
	byName := map[string]pve.VM{}
	for _, v := range live {
		byName[v.Name] = v
	}
	var out []Finding
	for _, d := range declared {
		s, ok := stateVM(d.Logical)
		v, live := byName[d.Name]
		if !ok || s.ID == "" || !live || (strconv.Itoa(v.VMID) == s.ID && (s.Host == "" || v.Node == s.Host)) {
			continue
		}
		out = append(out, Finding{
			Problem: fmt.Sprintf("the state of stack %q records Proxmox VM %q (%s) as VM %s on %s, but the cluster's %q is VM %d on %s: the state is older than the cluster (restored from an older backup?)",
				stack, d.Name, d.Logical, s.ID, s.Host, d.Name, v.VMID, v.Node),
			Fix: staleFix(stack),
		})
	}
	return out
}
