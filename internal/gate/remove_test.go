package gate

import (
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

func TestOnlyTheNamedNodeIsRemoved(t *testing.T) {
	gone := func(n string) []Step {
		return []Step{step(apitype.OpDelete, TypeLibvirtDomain, "c-"+n), step(apitype.OpDelete, TypeConfigApply, n+"-apply")}
	}
	for _, tc := range []struct {
		name    string
		steps   []Step
		removed string
		refuse  []string
	}{
		{"the named node", gone("w-2"), "w-2", nil},
		{"a node taken out of the config, none named", gone("w-2"), "", []string{"w-2"}},
		{"another node than the named one", slices.Concat(gone("w-2"), gone("cp-4")), "w-2", []string{"cp-4"}},
		// A replace deletes the old VM too, but creates the new one: its
		// delete is the replace's (the replace rules judge it).
		{"a replace", []Step{step(apitype.OpReplace, TypeLibvirtDomain, "c-cp-2")}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckRemoved(NewReport(tc.steps, "c"), tc.removed, "dev")
			if !slices.Equal(refused(got), tc.refuse) {
				t.Fatalf("refused %v, want %v: %v", refused(got), tc.refuse, got)
			}
			for _, r := range got {
				if !strings.Contains(r.Instead, "milner up --stack dev --remove "+r.Resource) {
					t.Errorf("refusal does not say how to remove the node: %s", r)
				}
			}
		})
	}
}
