package guard

import (
	"fmt"
	"strings"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/internal/fileid"
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
//   - A volume found by its key, but its file is not the one the state
//     records (Object.Incarnation, fileid.Differ): deleted and recreated
//     at the same path. A dir pool's key is the path, so the key alone
//     cannot tell; the file's birth time, handle and inode number can,
//     where the host tells them (a local URI) and the state recorded them
//     (a volume created or imported since milner records them: Unrecorded
//     lists the others, which the next up records).
//
// A preview without refresh, and the name-based Check, would pass each of
// these, and the next up would act on objects that are not what the state
// says. A state that records no name (an adoption stopped between a
// Proxmox import and its rename records the live one) is compared by id
// and host only. It refuses before anything changes.
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
			case d.Type == gate.TypeLibvirtVolume && fileid.Differ(s.Incarnation, o.Incarnation) != "":
				out = append(out, recreated(stack, declared, d, s, o))
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

// recreated is the finding of a volume whose file at its path is not the
// one the state records.
func recreated(stack string, declared []Declared, d Declared, s, o Object) Finding {
	return Finding{
		Problem: fmt.Sprintf("the state of stack %q records volume %q (%s, %s) as the file %s, but the file at %s is %s (another %s): deleted and recreated at the same path outside milner, so what was stored on the volume is not on it",
			stack, d.Name, d.Logical, disk(declared, d), s.Incarnation, o.ID, o.Incarnation, fileid.Differ(s.Incarnation, o.Incarnation)),
		Fix: fmt.Sprintf("if that was not meant, put the original file back at %s (from a backup of the pool) and run the command again; if the new file is meant to be the volume (an interrupted `milner up --replace <node> --os-disk` leaves one too), `milner up --stack %s --accept-recreated %s` records it",
			o.ID, stack, d.Logical),
		Recreated: d.Logical,
	}
}

// disk names a volume in messages by what it is: "node cp-1's data disk",
// "node cp-1's OS disk", "the boot media".
func disk(declared []Declared, d Declared) string {
	for _, w := range []struct{ suffix, what string }{{vocab.DataSuffix, "data disk"}, {vocab.OSSuffix, "OS disk"}} {
		if base, ok := strings.CutSuffix(d.Logical, w.suffix); ok {
			for _, dom := range declared {
				if dom.Type == gate.TypeLibvirtDomain && dom.Logical == base {
					return "node " + dom.Node + "'s " + w.what
				}
			}
		}
	}
	if strings.HasSuffix(d.Logical, vocab.BootSuffix) {
		return "the boot media"
	}
	return "a volume of the stack"
}

// Unrecorded lists the volumes the state holds, live under the key it
// records, whose file the state records no identity of while the host
// tells one (a stack from before milner recorded them, or an update that
// stopped before the substrate registered its outputs): there is nothing
// to compare them with, and the next up records them.
func Unrecorded(declared []Declared, state State, live []Object) []string {
	x := index(live)
	var out []string
	for _, d := range declared {
		s, ok := state[Ref{d.Type, d.Logical}]
		if d.Type != gate.TypeLibvirtVolume || !ok || s.Incarnation != "" {
			continue
		}
		if o, ok := x.id(d.Type, s.ID); ok && o.Incarnation != "" {
			out = append(out, d.Logical)
		}
	}
	return out
}
