package guard

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/internal/gate"
)

// goals returns the steps of the given types that carry the program's goal
// (every step but a delete), one per URN, in the preview's order: what the
// stack declares, as the engine's own preview of the program reports it.
func goals(steps []gate.Step, types ...string) []gate.Step {
	seen := map[string]bool{}
	var out []gate.Step
	for _, s := range steps {
		if s.Inputs == nil || seen[s.URN] || !slices.Contains(types, s.Type) {
			continue
		}
		seen[s.URN] = true
		out = append(out, s)
	}
	return out
}

// importID is the id an import step read the live object under (the
// node's adoptId as the provider knows it); "" for any other step.
func importID(s gate.Step) string {
	if s.Op == apitype.OpImport || s.Op == apitype.OpImportReplacement {
		return s.ID
	}
	return ""
}

// input reads a string input of a step; a missing or non-string value is
// an error, never a skipped guard.
func input(s gate.Step, key string) (string, error) {
	v, ok := s.Inputs[key].(string)
	if !ok {
		return "", fmt.Errorf("guard: preview step %s: input %q is %T, not a string", s.URN, key, s.Inputs[key])
	}
	return v, nil
}

// DeclaredBy returns the substrate objects the preview's steps declare,
// with their names: the names (and Proxmox VM ids) come from the program
// as the engine ran it, never from a copy of its naming. Domains and node
// VMs are named "<cluster>-<node>", disk holders "<cluster>-<node>-disks".
func DeclaredBy(steps []gate.Step, cluster string) ([]Declared, error) {
	var out []Declared
	pool := ""
	for _, s := range goals(steps, gate.TypeLibvirtDomain, gate.TypeLibvirtVolume, gate.TypeLibvirtNetwork, gate.TypeLibvirtPool, gate.TypeProxmoxVM) {
		name, err := input(s, "name")
		if err != nil {
			return nil, err
		}
		d := Declared{Type: s.Type, Logical: s.Name(), Name: name, ImportID: importID(s)}
		switch s.Type {
		case gate.TypeLibvirtDomain:
			d.Node = strings.TrimPrefix(d.Logical, cluster+"-")
			if _, ok := s.Inputs["description"]; ok {
				desc, err := input(s, "description")
				if err != nil {
					return nil, err
				}
				d.Owner = substrate.OwnerOf(desc)
			}
		case gate.TypeLibvirtPool:
			pool = name
			if t, ok := s.Inputs["target"]; ok {
				target, isMap := t.(map[string]any)
				path, isString := target["path"].(string)
				if !isMap || !isString {
					return nil, fmt.Errorf("guard: preview step %s: input target.path is not a string", s.URN)
				}
				d.Path = path
			}
		case gate.TypeProxmoxVM:
			if err := declareVM(&d, s, cluster); err != nil {
				return nil, err
			}
		}
		out = append(out, d)
	}
	// A stack has one pool; every volume it declares is in it.
	for i := range out {
		if out[i].Type == gate.TypeLibvirtVolume {
			out[i].Pool = pool
		}
	}
	return out, nil
}
