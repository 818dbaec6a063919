package pipeline

import (
	"slices"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/stacks/config"
)

// The control planes an up adds to a running cluster are waited for; a
// worker, or a new cluster's control planes, are not.
func TestAddedControlPlanes(t *testing.T) {
	cfg := &config.Config{Nodes: []config.NodeConfig{{Name: "cp-1", Role: vocab.RoleControlPlane}, {Name: "cp-4", Role: vocab.RoleControlPlane}, {Name: "w-2", Role: vocab.RoleWorker}}}
	step := func(op apitype.OpType, typ, name string) gate.Step {
		return gate.Step{Op: op, Type: typ, URN: "urn:pulumi:dev::milner::" + typ + "::" + name}
	}
	apply := func(n string) gate.Step { return step(apitype.OpCreate, gate.TypeConfigApply, n+"-apply") }
	for _, tc := range []struct {
		name  string
		steps []gate.Step
		want  []string
	}{
		{"a control plane added", []gate.Step{step(apitype.OpSame, gate.TypeTalosSecrets, "c-secrets"), apply("cp-4")}, []string{"cp-4"}},
		{"a worker added", []gate.Step{step(apitype.OpSame, gate.TypeTalosSecrets, "c-secrets"), apply("w-2")}, nil},
		{"a new cluster", []gate.Step{step(apitype.OpCreate, gate.TypeTalosSecrets, "c-secrets"), apply("cp-1"), apply("cp-4")}, nil},
	} {
		if got := addedControlPlanes(gate.NewReport(tc.steps, "c"), cfg); !slices.Equal(got, tc.want) {
			t.Errorf("%s: waited for %v, want %v", tc.name, got, tc.want)
		}
	}
}
