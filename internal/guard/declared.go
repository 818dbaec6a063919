package guard

import (
	"maps"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/internal/mockrun"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
)

// DeclaredLibvirt runs the stack's config through the program under the
// recording mock, stopped after the substrate layer (so no secret is
// needed), and returns the libvirt objects it declares with their names.
// The names come from the program itself, never from a copy of its naming.
func DeclaredLibvirt(stack string, cfg map[string]string) ([]Declared, error) {
	cfg = maps.Clone(cfg)
	cfg["milner:stopAfter"] = string(config.LayerSubstrate)
	rec, err := mockrun.Run(stacks.Program, stack, cfg)
	if err != nil {
		return nil, err
	}
	var out []Declared
	for _, r := range rec.Registrations() {
		switch r.Type {
		case TypeDomain, TypeVolume, TypeNetwork, TypePool:
		default:
			continue
		}
		d := Declared{Type: r.Type, Logical: r.Name, Name: r.Inputs["name"].StringValue(), ImportID: r.Options.ImportID}
		switch r.Type {
		case TypeDomain:
			// Domains are named "<cluster>-<node>" under the "<cluster>" component.
			cluster := resource.URN(r.Parent).Name()
			d.Node = strings.TrimPrefix(r.Name, cluster+"-")
			if desc := r.Inputs["description"]; desc.IsString() {
				d.Owner = substrate.OwnerOf(desc.StringValue())
			}
		case TypePool:
			if t := r.Inputs["target"]; t.IsObject() && t.ObjectValue()["path"].IsString() {
				d.Path = t.ObjectValue()["path"].StringValue()
			}
		}
		out = append(out, d)
	}
	// A stack has one pool; every volume it declares is in it.
	pool := ""
	for _, d := range out {
		if d.Type == TypePool {
			pool = d.Name
		}
	}
	for i := range out {
		if out[i].Type == TypeVolume {
			out[i].Pool = pool
		}
	}
	return out, nil
}
