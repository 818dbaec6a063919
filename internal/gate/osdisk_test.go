package gate

import (
	"slices"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// osDiskSteps is the preview of `milner up --replace cp-2 --os-disk` on a
// libvirt stack of cluster c: the node's VM, OS volume and config apply
// replaced (plus what a test adds).
func osDiskSteps(extra ...Step) []Step {
	urn := func(typ, name string) string { return "urn:pulumi:dev::milner::" + typ + "::" + name }
	steps := []Step{
		{Op: apitype.OpReplace, URN: urn(TypeLibvirtDomain, "c-cp-2"), Type: TypeLibvirtDomain, Diffs: []string{"disks"}},
		{Op: apitype.OpReplace, URN: urn(TypeLibvirtVolume, "c-cp-2-os"), Type: TypeLibvirtVolume},
		{Op: apitype.OpReplace, URN: urn(TypeConfigApply, "cp-2-apply"), Type: TypeConfigApply},
		{Op: apitype.OpSame, URN: urn(TypeLibvirtVolume, "c-cp-2-data"), Type: TypeLibvirtVolume},
	}
	return append(steps, extra...)
}

// The OS volume and the config apply of the recovered node are allowed to
// be replaced; the node's data volume, another node's OS volume and any
// other refusal stay refused; and without the VM's replace nothing is
// allowed. Fails with AllowOSDisk returning refusals unfiltered (the OS
// volume and apply are refused) or filtering by type alone (the data
// volume and cp-1's OS volume pass).
func TestAllowOSDiskAllowsExactlyThatNodesOSVolume(t *testing.T) {
	urn := func(typ, name string) string { return "urn:pulumi:dev::milner::" + typ + "::" + name }
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
		{name: "no VM replace", steps: osDiskSteps()[1:], refused: []string{"c-cp-2-os", "cp-2-apply", "cp-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReport(tt.steps, "c")
			got := refused(AllowOSDisk(Check(r, []string{"cp-2"}), r, "cp-2", "c-cp-2-os"))
			slices.Sort(got)
			want := slices.Clone(tt.refused)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("refused %v, want %v", got, want)
			}
		})
	}
}
