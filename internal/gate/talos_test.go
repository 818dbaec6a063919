package gate

import (
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// applyURN is the URN of a node's Talos configuration in the dev stack.
func applyURN(node string) string {
	return "urn:pulumi:dev::milner::milner:components:TalosNode$" + TypeConfigApply + "::" + node + "-apply"
}

func TestAddressChangeIsRefusedNamingTheProcedure(t *testing.T) {
	r := NewReport([]Step{
		{Op: apitype.OpUpdate, URN: applyURN("cp-2"), Type: TypeConfigApply, Diffs: []string{"endpoint", "machineConfigurationInput", "node"}},
		{Op: apitype.OpUpdate, URN: applyURN("cp-3"), Type: TypeConfigApply, Diffs: []string{"machineConfigurationInput"}},
	}, "milner-dev")
	rs := Check(r, nil, nil)
	if len(rs) != 1 || rs[0].Resource != "cp-2-apply" {
		t.Fatalf("refusals %v, want exactly cp-2-apply", rs)
	}
	for _, want := range []string{"node cp-2's address would change", "talosctl -n <old address> patch machineconfig", "milner up --stack dev"} {
		if !strings.Contains(rs[0].String(), want) {
			t.Errorf("refusal %q does not say %q", rs[0], want)
		}
	}
	// A replaced VM's node is judged by the VM rules, not as an address change.
	r = NewReport([]Step{
		{Op: apitype.OpReplace, URN: "urn:pulumi:dev::milner::milner:components:LibvirtSubstrate$" + TypeLibvirtDomain + "::milner-dev-cp-2", Type: TypeLibvirtDomain, Keys: []string{"memory"}},
		{Op: apitype.OpUpdate, URN: applyURN("cp-2"), Type: TypeConfigApply, Diffs: []string{"node"}},
	}, "milner-dev")
	if rs := Check(r, []string{"cp-2"}, nil); len(rs) != 0 {
		t.Errorf("a named replace was refused: %v", rs)
	}
}

func TestCheckContract(t *testing.T) {
	for _, tc := range []struct {
		recorded, declared string
		allow, refused     bool
	}{
		{"", "v1.9", false, false},       // a new cluster
		{"v1.9.5", "v1.9", false, false}, // a stack made before the split recorded the full version
		{"v1.9", "v1.9", false, false},
		{"v1.9", "v1.10", false, true},
		{"v1.9.5", "v1.10", true, false}, // explicitly asked
	} {
		rs := CheckContract(tc.recorded, tc.declared, tc.allow)
		if (len(rs) > 0) != tc.refused {
			t.Errorf("CheckContract(%q, %q, %v) = %v, want refused %v", tc.recorded, tc.declared, tc.allow, rs, tc.refused)
		}
		if len(rs) > 0 && !strings.Contains(rs[0].String(), "--allow-contract-change") {
			t.Errorf("refusal %q does not name the flag", rs[0])
		}
	}
}

func TestReportSaysHowEachNodeApplies(t *testing.T) {
	outputs := func(mode string) *apitype.StepEventStateMetadata {
		return &apitype.StepEventStateMetadata{Outputs: map[string]any{"resolvedApplyMode": mode}}
	}
	var evs []events.EngineEvent
	for node, mode := range map[string]string{"cp-1": "no_reboot", "cp-2": "staged", "cp-3": "04da6b54-80e4-46f7-96ec-b56ff0331ba9", "cp-4": "auto"} {
		evs = append(evs, events.EngineEvent{EngineEvent: apitype.EngineEvent{ResourcePreEvent: &apitype.ResourcePreEvent{
			Metadata: apitype.StepEventMetadata{Op: apitype.OpUpdate, URN: applyURN(node), Type: TypeConfigApply, New: outputs(mode), Diffs: []string{"machineConfigurationInput"}},
		}}})
	}
	out := NewReport(StepsFromEvents(evs), "milner-dev").String()
	for _, want := range []string{
		"cp-1: applies live (no_reboot",
		"cp-4: first config",
		"cp-2: staged, applies at the node's next reboot",
		"cp-3: decided when applied",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report does not say %q:\n%s", want, out)
		}
	}

	// In a preview the provider's output is often unknown; the mode the
	// program sends is the one applied, unless it leaves the choice to the
	// provider (staged_if_needing_reboot, a plain `pulumi preview`).
	unknown := "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
	evs = nil
	for node, mode := range map[string]string{"w-1": "no_reboot", "w-2": "staged", "w-3": "auto", "w-4": "staged_if_needing_reboot"} {
		st := &apitype.StepEventStateMetadata{Inputs: map[string]any{"applyMode": mode}, Outputs: map[string]any{"resolvedApplyMode": unknown}}
		evs = append(evs, events.EngineEvent{EngineEvent: apitype.EngineEvent{ResourcePreEvent: &apitype.ResourcePreEvent{
			Metadata: apitype.StepEventMetadata{Op: apitype.OpUpdate, URN: applyURN(node), Type: TypeConfigApply, New: st, Diffs: []string{"machineConfigurationInput"}},
		}}})
	}
	out = NewReport(StepsFromEvents(evs), "milner-dev").String()
	for _, want := range []string{"w-1: applies live (no_reboot", "w-2: staged, applies", "w-3: first config", "w-4: decided when applied"} {
		if !strings.Contains(out, want) {
			t.Errorf("preview report does not say %q:\n%s", want, out)
		}
	}

	// After an update, the staged nodes are named.
	var up []events.EngineEvent
	for node, mode := range map[string]string{"cp-1": "auto", "cp-2": "staged"} {
		up = append(up, events.EngineEvent{EngineEvent: apitype.EngineEvent{ResOutputsEvent: &apitype.ResOutputsEvent{
			Metadata: apitype.StepEventMetadata{URN: applyURN(node), Type: TypeConfigApply, New: outputs(mode)},
		}}})
	}
	if got := Staged(AppliedModes(up)); len(got) != 1 || got[0] != "cp-2" {
		t.Errorf("Staged = %v, want [cp-2]", got)
	}
}

func TestTalosChanged(t *testing.T) {
	replaceOnly := NewReport([]Step{
		{Op: apitype.OpReplace, URN: "urn:pulumi:dev::milner::milner:components:LibvirtSubstrate$" + TypeLibvirtDomain + "::milner-dev-cp-2", Type: TypeLibvirtDomain},
		{Op: apitype.OpUpdate, URN: applyURN("cp-2"), Type: TypeConfigApply},
	}, "milner-dev")
	if replaceOnly.TalosChanged([]string{"cp-2"}) {
		t.Error("a replace of cp-2 alone counts as a Talos change: the health check would block the recovery")
	}
	if !replaceOnly.TalosChanged(nil) {
		t.Error("an update of cp-2's config without a replace is a Talos change")
	}
	if load(t, "noop.jsonl").TalosChanged(nil) {
		t.Error("a no-op is a Talos change")
	}
	if !load(t, "create.jsonl").TalosChanged(nil) {
		t.Error("a first up is not a Talos change: apps would not wait for a healthy cluster")
	}
	// The kubeconfig's update (a renewal, or the control plane it asks)
	// changes no node: a renewal with a control plane down must not wait on
	// a health check of that node; a new kubeconfig comes with the cluster.
	kubeconfig := "urn:pulumi:dev::milner::" + TypeKubeconfig + "::milner-dev-kubeconfig"
	renewal := NewReport([]Step{{Op: apitype.OpUpdate, URN: kubeconfig, Type: TypeKubeconfig, Diffs: []string{"node", "endpoint"}}}, "milner-dev")
	if renewal.TalosChanged(nil) {
		t.Error("an update of the kubeconfig alone counts as a Talos change: its renewal would wait on every node's health")
	}
	if !NewReport([]Step{{Op: apitype.OpCreate, URN: kubeconfig, Type: TypeKubeconfig}}, "milner-dev").TalosChanged(nil) {
		t.Error("a kubeconfig created is not a Talos change")
	}
}
