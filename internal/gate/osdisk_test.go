package gate

import (
	"slices"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

func urn(typ, name string) string { return "urn:pulumi:dev::milner::" + typ + "::" + name }

// osDiskTargets are the URNs `milner up --replace cp-2 --os-disk` asks the
// preview to replace: the node's VM, OS volume and config apply.
var osDiskTargets = []string{urn(TypeLibvirtDomain, "c-cp-2"), urn(TypeLibvirtVolume, "c-cp-2-os"), urn(TypeConfigApply, "cp-2-apply")}

// osDiskSteps is the preview of `milner up --replace cp-2 --os-disk` on a
// libvirt stack of cluster c: the node's VM, OS volume and config apply
// replaced (plus what a test adds).
func osDiskSteps(extra ...Step) []Step {
	steps := []Step{
		{Op: apitype.OpReplace, URN: urn(TypeLibvirtDomain, "c-cp-2"), Type: TypeLibvirtDomain, Diffs: []string{"disks"}},
		{Op: apitype.OpReplace, URN: urn(TypeLibvirtVolume, "c-cp-2-os"), Type: TypeLibvirtVolume},
		{Op: apitype.OpReplace, URN: urn(TypeConfigApply, "cp-2-apply"), Type: TypeConfigApply},
		{Op: apitype.OpSame, URN: urn(TypeLibvirtVolume, "c-cp-2-data"), Type: TypeLibvirtVolume},
	}
	return append(steps, extra...)
}

// The OS volume and the config apply of the recovered node, targeted by
// URN, are allowed to be replaced; the node's data volume, another node's
// OS volume and any other refusal stay refused; and without the VM's
// replace the preview is refused. Fails with Check ignoring its targets
// (the OS volume and apply are refused) or allowing by type alone (the
// data volume and cp-1's OS volume pass).
func TestOSDiskTargetsAllowExactlyThatNodesOSVolume(t *testing.T) {
	tests := []struct {
		name    string
		steps   []Step
		refused []string
	}{
		{name: "OS volume and apply", steps: osDiskSteps()},
		{name: "data volume too", steps: osDiskSteps(Step{Op: apitype.OpReplace, URN: urn(TypeLibvirtVolume, "c-cp-2-data"), Type: TypeLibvirtVolume}),
			refused: []string{"c-cp-2-data"}},
		{name: "another node's OS volume", steps: osDiskSteps(Step{Op: apitype.OpReplace, URN: urn(TypeLibvirtVolume, "c-cp-1-os"), Type: TypeLibvirtVolume}),
			refused: []string{"c-cp-1-os"}},
		{name: "no VM replace", steps: osDiskSteps()[1:], refused: []string{"cp-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReport(tt.steps, "c")
			got := refused(Check(r, []string{"cp-2"}, osDiskTargets))
			slices.Sort(got)
			want := slices.Clone(tt.refused)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("refused %v, want %v", got, want)
			}
		})
	}
}
