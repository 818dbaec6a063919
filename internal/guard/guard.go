// Package guard refuses an `up` that would recreate or duplicate what already
// lives on the substrate: a stack whose state is empty (or lost its
// substrate) while its machines and disks exist, and orphans — objects named
// like the stack's own but absent from its state, such as a domain left
// defined by a libvirtd crash in the middle of a create.
//
// The fix it prints is always adoption or a state restore, never a delete.
package guard

import (
	"fmt"
	"net/url"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/milner/milner/internal/gate"
)

// Libvirt type tokens the guard compares.
const (
	TypeDomain  = gate.TypeLibvirtDomain
	TypeVolume  = gate.TypeLibvirtVolume
	TypeNetwork = gate.TypeLibvirtNetwork
	TypePool    = gate.TypeLibvirtPool
)

// Object is one named object on a libvirt host.
type Object struct {
	// Type is the Pulumi type token of the resource that manages such an object.
	Type string
	// Name is the libvirt name.
	Name string
	// ID is what the provider uses as the resource id: the UUID of a
	// domain, network or pool, the key (path) of a volume.
	ID string
	// Stopped is set for a defined domain that is not running.
	Stopped bool
}

// Declared is one libvirt object the stack declares.
type Declared struct {
	// Type is the resource's type token.
	Type string
	// Logical is the resource's logical name (a state contract).
	Logical string
	// Name is the libvirt name the program gives it.
	Name string
	// Node is the node a domain belongs to; "" for other objects.
	Node string
	// ImportID is the id the program imports this object under (a node's
	// adoptId): the live object with that id is being adopted, not orphaned.
	ImportID string
}

// Finding is one reason to refuse an up, with what to do instead.
type Finding struct {
	// Problem says what is wrong.
	Problem string
	// Fix is the command or step that resolves it without losing anything.
	Fix string
}

func (f Finding) String() string { return f.Problem + "\n    fix: " + f.Fix }

// Check compares what the stack declares with what its state holds
// (inState reports a type and logical name present in state) and what lives
// on the host. It returns nothing when an up can neither recreate nor
// duplicate a live object.
func Check(stack string, declared []Declared, inState func(typ, logical string) bool, live []Object) []Finding {
	byName := map[string]Object{}
	for _, o := range live {
		byName[o.Type+"::"+o.Name] = o
	}
	stateHasSubstrate := false
	var orphans []Finding
	var adopt []string
	for _, d := range declared {
		if inState(d.Type, d.Logical) {
			stateHasSubstrate = true
			continue
		}
		o, ok := byName[d.Type+"::"+d.Name]
		if !ok || (d.ImportID != "" && strings.EqualFold(d.ImportID, o.ID)) {
			continue
		}
		f := Finding{Problem: fmt.Sprintf("%s %q (%s) exists on the host but not in the state of stack %q: an up would fail on it or create a duplicate", kind(d.Type), d.Name, d.Logical, stack)}
		if d.Type == TypeDomain && d.Node != "" {
			cmd := fmt.Sprintf("milner adopt --stack %s --node %s --id %s", stack, d.Node, o.ID)
			if o.Stopped {
				// A crash between define and start leaves the domain shut
				// off; the config says running, so adoption needs it started.
				cmd = fmt.Sprintf("virsh start %s && %s", d.Name, cmd)
			}
			adopt = append(adopt, cmd)
			f.Fix = cmd
		} else {
			f.Fix = fmt.Sprintf("restore the stack's state file from its backup, or import it: pulumi import --stack %s '%s' '%s' '%s' (then give it the substrate component as parent)", stack, d.Type, d.Logical, o.ID)
		}
		orphans = append(orphans, f)
	}
	if len(orphans) == 0 {
		return nil
	}
	if !stateHasSubstrate {
		fix := "restore the state file (the file backend keeps it under .pulumi/state), then run the up again"
		if len(adopt) > 0 {
			fix += "; or adopt the nodes: " + strings.Join(adopt, " && ")
		}
		empty := Finding{
			Problem: fmt.Sprintf("the state of stack %q holds no substrate resource, but %d of its objects live on the host: an up from empty state would try to recreate live machines and disks", stack, len(orphans)),
			Fix:     fix,
		}
		return append([]Finding{empty}, orphans...)
	}
	return orphans
}

// kind names a type token for messages.
func kind(typ string) string {
	switch typ {
	case TypeDomain:
		return "domain"
	case TypeVolume:
		return "volume"
	case TypeNetwork:
		return "network"
	case TypePool:
		return "pool"
	default:
		return typ
	}
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
		out = append(out, Object{Type: TypeDomain, Name: d.Name, ID: uuid(d.UUID), Stopped: d.ID < 0})
	}
	nets, _, err := l.ConnectListAllNetworks(1, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: list networks: %w", uri, err)
	}
	for _, n := range nets {
		out = append(out, Object{Type: TypeNetwork, Name: n.Name, ID: uuid(n.UUID)})
	}
	pools, _, err := l.ConnectListAllStoragePools(1, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: list pools: %w", uri, err)
	}
	for _, p := range pools {
		out = append(out, Object{Type: TypePool, Name: p.Name, ID: uuid(p.UUID)})
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		if err != nil {
			// An inactive pool cannot list its volumes; its name still counts.
			continue
		}
		for _, v := range vols {
			out = append(out, Object{Type: TypeVolume, Name: v.Name, ID: v.Key})
		}
	}
	return out, nil
}

// uuid formats a libvirt UUID as libvirt prints it.
func uuid(u golibvirt.UUID) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
