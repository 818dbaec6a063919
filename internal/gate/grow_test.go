package gate

import (
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

func TestOneNewNodePerRun(t *testing.T) {
	kept := step(apitype.OpSame, TypeTalosSecrets, "c-secrets")
	added := func(n string) []Step {
		return []Step{step(apitype.OpCreate, TypeLibvirtDomain, "c-"+n), step(apitype.OpCreate, TypeConfigApply, n+"-apply")}
	}
	for _, tc := range []struct {
		name   string
		steps  []Step
		refuse []string
	}{
		{"a new cluster", slices.Concat([]Step{step(apitype.OpCreate, TypeTalosSecrets, "c-secrets")}, added("cp-1"), added("cp-2"), added("w-1")), nil},
		{"one node added", slices.Concat([]Step{kept}, added("w-2")), nil},
		{"two nodes added", slices.Concat([]Step{kept}, added("w-2"), added("cp-4")), []string{"w-2"}},
		{"three nodes added", slices.Concat([]Step{kept}, added("w-3"), added("w-2"), added("cp-4")), []string{"w-2", "w-3"}},
		// After a state loss, the applies are created on VMs in state.
		{"recovery", []Step{kept, step(apitype.OpSame, TypeLibvirtDomain, "c-cp-1"), step(apitype.OpCreate, TypeConfigApply, "cp-1-apply"),
			step(apitype.OpSame, TypeLibvirtDomain, "c-cp-2"), step(apitype.OpCreate, TypeConfigApply, "cp-2-apply")}, nil},
		// The substrate alone (stopAfter: substrate): VMs, no Talos config.
		{"two VMs, no Talos layer", []Step{step(apitype.OpCreate, TypeLibvirtDomain, "c-w-2"), step(apitype.OpCreate, TypeLibvirtDomain, "c-w-3")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckOneNewNode(NewReport(tc.steps, "c"), "dev")
			if !slices.Equal(refused(got), tc.refuse) {
				t.Fatalf("refused %v, want %v: %v", refused(got), tc.refuse, got)
			}
			for _, r := range got {
				if !strings.Contains(r.Reason, "adds") || !strings.Contains(r.Instead, "milner up --stack dev") {
					t.Errorf("refusal says neither what nor what to do: %s", r)
				}
			}
		})
	}
}
