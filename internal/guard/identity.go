package guard

import (
	"fmt"

	"github.com/milner/milner/internal/gate"
)

// Stale compares identities, not names: for each declared object the state
// records, a live object of the same name with another id (or, for a
// Proxmox VM, on another host) than the state records means the state is
// not the substrate's present: typically a state restored from an older
// backup, after which a domain was replaced (new UUID), a volume recreated
// (new key), or a VM's vmId changed or the VM moved host. A preview
// without refresh, and the name-based Check, would both pass, and the next
// up would act on objects that no longer exist. Proxmox VM ids are fixed
// in the stack's config, so a replace alone keeps them: the guard compares
// what a restore can make disagree. A guest carrying the state's VM id
// under another name is not stale: an adoption that stopped between its
// import and its rename looks the same. It refuses before anything changes.
func Stale(stack string, declared []Declared, state State, live []Object) []Finding {
	byKey := index(live)
	var out []Finding
	for _, d := range declared {
		s, ok := state[Ref{d.Type, d.Logical}]
		o, live := byKey[liveKey(d.Type, d.Pool, d.Name)]
		if !ok || s.ID == "" || !live || (o.ID == s.ID && (s.Host == "" || o.Host == s.Host)) {
			continue
		}
		where := "host"
		if d.Type == gate.TypeProxmoxVM {
			where = "cluster"
		}
		out = append(out, Finding{
			Problem: fmt.Sprintf("the state of stack %q records %s %q (%s) as %s, but the %s's %q is %s: the state is older than the %s (restored from an older backup?)",
				stack, kind(d.Type), d.Name, d.Logical, identity(d.Type, s), where, d.Name, identity(d.Type, o), where),
			Fix: staleFix(stack),
		})
	}
	return out
}

// identity names an object's identity in messages: a domain's UUID or a
// volume's key; a Proxmox VM's id and host.
func identity(typ string, o Object) string {
	if typ == gate.TypeProxmoxVM {
		return "VM " + o.ID + " on " + o.Host
	}
	return o.ID
}

// staleFix is what to do about a state older than the host.
func staleFix(stack string) string {
	return fmt.Sprintf("if a restore caused it, `milner state restore --stack %s --backup latest` undoes it; otherwise `milner refresh --stack %s` records what lives, and `milner preview --stack %s` shows the rest", stack, stack, stack)
}
