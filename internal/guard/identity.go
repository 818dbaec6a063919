package guard

import (
	"fmt"

	"github.com/milner/milner/internal/gate"
)

// Stale compares identities, not names: for each declared object the state
// records, the live object is found by the state's id first, then by name.
//   - Found by its id under another name than the state records: renamed
//     on the substrate, outside Milner (a domain or network by virsh, a
//     guest in PVE); an up would act on the state's name.
//   - Found by its id on another host than the state records (a Proxmox
//     VM moved).
//   - Not found by its id, but a live object has its name: the state is
//     not the substrate's present, typically a state restored from an
//     older backup after which a domain was replaced (new UUID), a volume
//     recreated under a new key, a VM's vmId changed.
//   - Several live objects of its name: a refusal, never the last listed.
//
// A preview without refresh, and the name-based Check, would pass each of
// these, and the next up would act on objects that are not what the state
// says. A state that records no name (an adoption stopped between a
// Proxmox import and its rename records the live one) is compared by id
// and host only. A volume's id is its key, its path: one recreated at the
// same path has the same key, and libvirt exposes nothing else that tells
// the two apart (docs/threat-model.md says what is left). It refuses
// before anything changes.
func Stale(stack string, declared []Declared, state State, live []Object) []Finding {
	x := index(live)
	var out []Finding
	for _, d := range declared {
		s, ok := state[Ref{d.Type, d.Logical}]
		if !ok || s.ID == "" {
			continue
		}
		where := "host"
		if d.Type == gate.TypeProxmoxVM {
			where = "cluster"
		}
		if o, ok := x.id(d.Type, s.ID); ok {
			switch {
			case s.Host != "" && o.Host != s.Host:
				out = append(out, stale(stack, d, s, o, where))
			case s.Name != "" && o.Name != s.Name:
				out = append(out, Finding{
					Problem: fmt.Sprintf("the state of stack %q records %s %s (%s) as %q, but on the %s it is named %q: renamed outside milner",
						stack, kind(d.Type), identity(d.Type, o), d.Logical, s.Name, where, o.Name),
					Fix: fmt.Sprintf("rename it back to %q on the %s, or `milner refresh --stack %s` records the new name and `milner preview --stack %s` shows what the up would change", s.Name, where, stack, stack),
				})
			}
			continue
		}
		switch same := x.named(d.Type, d.Pool, d.Name); len(same) {
		case 0:
		case 1:
			out = append(out, stale(stack, d, s, same[0], where))
		default:
			out = append(out, duplicate(stack, d, same))
		}
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

// stale is the finding of a state that records d as s while the host (or
// cluster) holds it as o: a state older than the substrate. A restore
// undoes it when a restore caused it.
func stale(stack string, d Declared, s, o Object, where string) Finding {
	return Finding{
		Problem: fmt.Sprintf("the state of stack %q records %s %q (%s) as %s, but the %s's %q is %s: the state is older than the %s (restored from an older backup?)",
			stack, kind(d.Type), d.Name, d.Logical, identity(d.Type, s), where, d.Name, identity(d.Type, o), where),
		Fix: fmt.Sprintf("if a restore caused it, `milner state restore --stack %s --backup latest` undoes it; otherwise `milner refresh --stack %s` records what lives, and `milner preview --stack %s` shows the rest", stack, stack, stack),
	}
}
