// Package guard refuses an `up` that would recreate or duplicate what already
// lives on the substrate: a stack whose state is empty (or lost its
// substrate) while its machines and disks exist, and orphans — objects named
// like the stack's own but absent from its state, such as a domain left
// defined by a libvirtd crash in the middle of a create.
//
// The fix it prints is always adoption or a state restore, never a delete.
package guard

import (
	"encoding/xml"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"

	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/internal/gate"
)

// Object is one object live on the substrate (a libvirt domain, network,
// pool or volume; a Proxmox guest), or what the stack's state records of
// one (ID, and Host for a Proxmox VM).
type Object struct {
	// Type is the Pulumi type token of the resource that manages such an object.
	Type string
	// Name is the libvirt or PVE name.
	Name string
	// ID is what the provider uses as the resource id: the UUID of a
	// domain, network or pool, the key (path) of a volume, the VM id of a
	// Proxmox guest (bpg's id).
	ID string
	// Stopped is set for a defined domain that is not running, a Proxmox
	// guest "stopped".
	Stopped bool
	// Owner is the "<project>/<stack>" of a domain's owner tag
	// (substrate.OwnerTag); "" when the domain carries none.
	Owner string
	// Pool is the pool a volume is in.
	Pool string
	// Path is a pool's target directory.
	Path string
	// Host is the PVE node a Proxmox guest is on (in state: the nodeName input).
	Host string
	// Incarnation is the identity of a volume's file (internal/fileid):
	// live, as the host tells it now; in state, as the substrate component
	// recorded it when the volume was created or imported
	// (substrate.VolumeIdentities). "" where none is told or recorded.
	Incarnation string
}

// Declared is one substrate object the stack declares.
type Declared struct {
	// Type is the resource's type token.
	Type string
	// Logical is the resource's logical name (a state contract).
	Logical string
	// Name is the libvirt or PVE name the program gives it.
	Name string
	// Node is the cluster node a domain or VM belongs to (cp-1); "" for
	// other objects.
	Node string
	// ImportID is the id the preview's import step read the object under
	// (a node's adoptId, holderAdoptId; bpg's id is the VM id): the live
	// object with that id is being adopted, not orphaned.
	ImportID string
	// Owner is the owner tag's "<project>/<stack>" a domain is created with.
	Owner string
	// Pool is the libvirt name of the pool a volume is in.
	Pool string
	// Path is a pool's target directory.
	Path string
	// VMID is a Proxmox VM's fixed PVE VM id.
	VMID int
	// Host is the PVE node a Proxmox VM runs on.
	Host string
	// Holder is set for a Proxmox disk holder VM.
	Holder bool
	// DiskSlots are the config keys a Proxmox node VM attaches its disks on (virtio0, virtio1).
	DiskSlots []string
}

// Ref names a resource in the stack's state.
type Ref struct{ Type, Logical string }

// State is what the stack's state records of its resources, by type and
// logical name: each one's ID (and Host).
type State map[Ref]Object

// liveIndex finds live objects by identity (type and id) and by name
// (liveKey). Names are not unique everywhere: PVE lets two guests share
// one, and a listing of several hosts may repeat one.
type liveIndex struct {
	byID   map[string]Object
	byName map[string][]Object
}

func index(live []Object) liveIndex {
	x := liveIndex{byID: map[string]Object{}, byName: map[string][]Object{}}
	for _, o := range live {
		k := liveKey(o.Type, o.Pool, o.Name)
		x.byName[k] = append(x.byName[k], o)
		x.byID[o.Type+"#"+o.ID] = o
	}
	return x
}

// id is the live object of type typ whose id is id.
func (x liveIndex) id(typ, id string) (Object, bool) {
	o, ok := x.byID[typ+"#"+id]
	return o, ok && id != ""
}

// named are the live objects of type typ named name (in pool, for a volume).
func (x liveIndex) named(typ, pool, name string) []Object {
	return x.byName[liveKey(typ, pool, name)]
}

// duplicate is the finding of a name several live objects carry: the guard
// cannot tell which one is the stack's, and never picks one.
func duplicate(stack string, d Declared, same []Object) Finding {
	ids := make([]string, len(same))
	for i, o := range same {
		ids[i] = identity(d.Type, o)
	}
	return Finding{
		Problem: fmt.Sprintf("%d live objects are named %q (%s of stack %q): %s; milner cannot tell which one is the stack's",
			len(same), d.Name, d.Logical, stack, strings.Join(ids, ", ")),
		Fix: "rename or remove the ones that are not this stack's by hand, then run the command again",
	}
}

// liveKey keys live and declared objects alike: volumes by pool and name
// (two pools may hold volumes of one name), everything else by name.
func liveKey(typ, pool, name string) string {
	if typ == gate.TypeLibvirtVolume {
		return typ + "::" + pool + "::" + name
	}
	return typ + "::" + name
}

// Finding is one reason to refuse an up, with what to do instead.
type Finding struct {
	// Problem says what is wrong.
	Problem string
	// Fix is the command or step that resolves it without losing anything.
	Fix string
	// Recreated is the logical name of a volume whose file was recreated
	// at its path ("" for every other finding): what `milner up
	// --accept-recreated` names to record the new file instead.
	Recreated string
}

func (f Finding) String() string { return f.Problem + "\n    fix: " + f.Fix }

// Check compares what the stack declares with what its state holds and
// what lives on the substrate. It returns nothing when an up can neither
// recreate nor duplicate a live object. configOf returns a live Proxmox
// VM's config (nil when unreadable; the func may be nil on libvirt).
// When the state holds no substrate at all, the findings are led by the
// empty-state one: the seeds' danger, an up from lost state recreating
// live machines.
func Check(stack string, declared []Declared, state State, live []Object, configOf func(host string, vmid int) map[string]any) []Finding {
	missing, stateHasSubstrate := lost(declared, state, live)
	var orphans []Finding
	var adopt []string // the steps that adopt them all, in order
	for _, m := range missing {
		var f Finding
		var step string
		switch {
		case m.same != nil:
			f = duplicate(stack, m.d, m.same)
		case m.d.Type == gate.TypeProxmoxVM:
			f, step = orphanVM(stack, m.d, m.o, declared, live, configOf)
		default:
			f, step = orphan(stack, m.d, m.o)
		}
		orphans = append(orphans, f)
		if step != "" {
			adopt = append(adopt, step)
		}
	}
	if len(orphans) == 0 || stateHasSubstrate {
		return orphans
	}
	where, what := "VMs live on the Proxmox cluster", "VMs"
	if missing[0].d.Type != gate.TypeProxmoxVM {
		where, what = "objects live on the host", "live objects"
		adopt = append(adopt, fmt.Sprintf("milner adopt --stack %s --all", stack))
	}
	fix := "restore the stack's state from a backup of its backend (docs/runbooks/recover.md), then run the up again"
	if len(adopt) > 0 {
		fix += "; or adopt the " + what + ": " + strings.Join(adopt, " && ")
	}
	empty := Finding{
		Problem: fmt.Sprintf("the state of stack %q holds no substrate resource, but %d of its %s: an up from empty state would try to recreate live machines and disks", stack, len(orphans), where),
		Fix:     fix,
	}
	return append([]Finding{empty}, orphans...)
}

// orphan is the finding of a libvirt object live on the host but absent
// from state, and the start a stopped domain needs before `adopt --all`.
func orphan(stack string, d Declared, o Object) (Finding, string) {
	if f, foreign := foreignObject(stack, d, o); foreign {
		return f, ""
	}
	f := Finding{Problem: fmt.Sprintf("%s %q (%s) exists on the host but not in the state of stack %q: an up would fail on it or create a duplicate", kind(d.Type), d.Name, d.Logical, stack)}
	if d.Type == gate.TypeLibvirtDomain && o.Owner == "" {
		f.Problem += "; it carries no Milner owner tag (made before tags, or not by Milner): check `virsh dumpxml " + d.Name + "` is this cluster's machine before adopting it"
	}
	if d.Type == gate.TypeLibvirtVolume {
		f.Problem += "; a volume `milner up --remove` kept is one: docs/runbooks/remove-node.md says when to adopt it and when to delete it"
	}
	if d.Type != gate.TypeLibvirtDomain || d.Node == "" {
		// Pools, networks and volumes are adopted by their logical name
		// (milner:substrate.libvirt.adopt), all at once.
		f.Fix = fmt.Sprintf("milner adopt --stack %s --all", stack)
		return f, ""
	}
	f.Fix = fmt.Sprintf("milner adopt --stack %s --node %s --id %s", stack, d.Node, o.ID)
	if !o.Stopped {
		return f, ""
	}
	// A crash between define and start leaves the domain shut off; the
	// config says running, so adoption needs it started.
	start := "virsh start " + d.Name
	f.Fix = start + " && " + f.Fix
	return f, start
}

// pair is a declared object and the live object of its name; same holds
// every live object of that name when there are several (o is then unset).
type pair struct {
	d    Declared
	o    Object
	same []Object
}

// lost returns the declared objects that are absent from state but live on
// the substrate (a Proxmox VM matched by its VM id, else by name; the rest
// by name) and not already being imported under their live id, and whether
// the state holds any declared object at all.
func lost(declared []Declared, state State, live []Object) ([]pair, bool) {
	x := index(live)
	var out []pair
	stateHasSubstrate := false
	for _, d := range declared {
		if _, ok := state[Ref{d.Type, d.Logical}]; ok {
			stateHasSubstrate = true
			continue
		}
		o, ok := x.id(d.Type, strconv.Itoa(d.VMID))
		if !ok || d.VMID == 0 {
			same := x.named(d.Type, d.Pool, d.Name)
			if len(same) > 1 {
				out = append(out, pair{d: d, same: same})
				continue
			}
			if ok = len(same) == 1; ok {
				o = same[0]
			}
		}
		if !ok || (d.ImportID != "" && (strings.EqualFold(d.ImportID, o.ID) || d.ImportID == o.Host+"/"+o.ID)) {
			continue
		}
		out = append(out, pair{d: d, o: o})
	}
	return out, stateHasSubstrate
}

// Adoption is what `milner adopt --all` records for the next up to import.
type Adoption struct {
	// Nodes maps a node name to its live domain's UUID (nodes[i].adoptId).
	Nodes map[string]string
	// Objects maps the logical name of a pool, network or volume to its
	// live id (milner:substrate.libvirt.adopt).
	Objects map[string]string
}

// Adopt returns the adoption of every live libvirt object of the stack that
// its state lacks. An object provably another stack's, or a domain that is
// shut off, is not adopted: it comes back as a finding with its fix.
func Adopt(stack string, declared []Declared, state State, live []Object) (Adoption, []Finding) {
	missing, _ := lost(declared, state, live)
	a := Adoption{Nodes: map[string]string{}, Objects: map[string]string{}}
	var refused []Finding
	for _, m := range missing {
		d, o := m.d, m.o
		if m.same != nil {
			refused = append(refused, duplicate(stack, d, m.same))
			continue
		}
		if f, foreign := foreignObject(stack, d, o); foreign {
			refused = append(refused, f)
			continue
		}
		switch {
		case d.Type == gate.TypeLibvirtDomain && o.Stopped:
			refused = append(refused, Finding{
				Problem: fmt.Sprintf("domain %q is shut off; the config says running", d.Name),
				Fix:     fmt.Sprintf("virsh start %s, then adopt again", d.Name),
			})
		case d.Type == gate.TypeLibvirtDomain:
			a.Nodes[d.Node] = o.ID
		default:
			a.Objects[d.Logical] = o.ID
		}
	}
	return a, refused
}

// foreignObject reports a live object that has this stack's name but is
// provably someone else's: a domain tagged for another stack, or a pool of
// this name at another directory. Such an object is never offered for
// adoption: the fix is a name of this stack's own.
func foreignObject(stack string, d Declared, o Object) (Finding, bool) {
	fix := "give this stack its own milner:cluster.name (every libvirt name derives from it); never adopt or import another stack's objects"
	switch {
	case d.Type == gate.TypeLibvirtDomain && o.Owner != "" && d.Owner != "" && o.Owner != d.Owner:
		return Finding{
			Problem: fmt.Sprintf("domain %q belongs to %s (its owner tag), not to stack %q (%s): both declare the same machine name", d.Name, o.Owner, stack, d.Owner),
			Fix:     fix,
		}, true
	case d.Type == gate.TypeLibvirtPool && o.Path != "" && d.Path != "" && o.Path != d.Path:
		return Finding{
			Problem: fmt.Sprintf("pool %q exists on the host at %s, not at stack %q's %s: it is another pool of the same name", d.Name, o.Path, stack, d.Path),
			Fix:     fix,
		}, true
	}
	return Finding{}, false
}

// kind names a type token for messages: "Proxmox VM", or its type's name
// in lower case (domain, volume, network, pool).
func kind(typ string) string {
	if typ == gate.TypeProxmoxVM {
		return "Proxmox VM"
	}
	return strings.ToLower(tokens.Type(typ).Name().String())
}

// ListLibvirt lists every domain, network, pool and volume on the libvirt
// host at uri (e.g. qemu:///system), read-only.
func ListLibvirt(uri string) ([]Object, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("libvirt uri %q: %w", uri, err)
	}
	l, err := golibvirt.ConnectToURI(u)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", uri, err)
	}
	defer func() { _ = l.Disconnect() }()

	var out []Object
	domains, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: list domains: %w", uri, err)
	}
	for _, d := range domains {
		// libvirt gives an inactive domain the id -1.
		o := Object{Type: gate.TypeLibvirtDomain, Name: d.Name, ID: uuid(d.UUID), Stopped: d.ID < 0}
		// virDomainGetMetadata(VIR_DOMAIN_METADATA_DESCRIPTION) is the
		// domain's <description>; it fails when there is none.
		if desc, err := l.DomainGetMetadata(d, int32(golibvirt.DomainMetadataDescription), nil, golibvirt.DomainAffectCurrent); err == nil {
			o.Owner = substrate.OwnerOf(desc)
		}
		out = append(out, o)
	}
	nets, _, err := l.ConnectListAllNetworks(1, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: list networks: %w", uri, err)
	}
	for _, n := range nets {
		out = append(out, Object{Type: gate.TypeLibvirtNetwork, Name: n.Name, ID: uuid(n.UUID)})
	}
	pools, _, err := l.ConnectListAllStoragePools(1, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: list pools: %w", uri, err)
	}
	for _, p := range pools {
		o := Object{Type: gate.TypeLibvirtPool, Name: p.Name, ID: uuid(p.UUID)}
		if desc, err := l.StoragePoolGetXMLDesc(p, 0); err == nil {
			var x struct {
				Path string `xml:"target>path"`
			}
			if xml.Unmarshal([]byte(desc), &x) == nil {
				o.Path = x.Path
			}
		}
		out = append(out, o)
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		if err != nil {
			// An inactive pool cannot list its volumes; its name still counts.
			continue
		}
		for _, v := range vols {
			out = append(out, Object{Type: gate.TypeLibvirtVolume, Name: v.Name, ID: v.Key, Pool: p.Name})
		}
	}
	return out, nil
}

// uuid formats a libvirt UUID as libvirt prints it.
func uuid(u golibvirt.UUID) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
