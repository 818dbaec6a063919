package gate

import (
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// A "same" step that turns retainOnDelete on changes nothing in the cluster
// but is not an empty preview: `milner up` must apply it, or the option
// never reaches state and removing the app later is still refused.
func TestOptionOnlyChangeIsNotEmpty(t *testing.T) {
	urn := "urn:pulumi:dev::milner::milner:components:HelmApp$" + TypeHelmRelease + "::beta-release"
	step := func(oldRetain, newRetain bool) []events.EngineEvent {
		return []events.EngineEvent{{EngineEvent: apitype.EngineEvent{ResourcePreEvent: &apitype.ResourcePreEvent{
			Metadata: apitype.StepEventMetadata{Op: apitype.OpSame, URN: urn, Type: TypeHelmRelease,
				Old: &apitype.StepEventStateMetadata{RetainOnDelete: oldRetain},
				New: &apitype.StepEventStateMetadata{RetainOnDelete: newRetain}},
		}}}}
	}
	if r := NewReport(StepsFromEvents(step(true, true)), "milner-dev"); !r.Empty() {
		t.Fatalf("an unchanged option: want an empty report, got:\n%s", r)
	}
	r := NewReport(StepsFromEvents(step(false, true)), "milner-dev")
	if r.Empty() {
		t.Fatal("retainOnDelete false -> true: want a report that is not empty")
	}
	if rs := Check(r, nil, nil); len(rs) != 0 {
		t.Fatalf("an option change was refused: %v", rs)
	}
	if out := r.String(); !strings.Contains(out, "options beta-release (kubernetes:helm.sh/v3:Release): retainOnDelete false -> true") {
		t.Fatalf("the report does not name the option change:\n%s", out)
	}
}

// TestStepsCarryInputsAndTheImportedID: a step keeps its goal's inputs,
// and an import step the id its outputs event reports (the engine sends the
// pre-event before the import's Read, with no id yet): what the guards
// compare with the live objects.
func TestStepsCarryInputsAndTheImportedID(t *testing.T) {
	urn := "urn:pulumi:dev::milner::" + TypeLibvirtDomain + "::milner-dev-cp-2"
	meta := apitype.StepEventMetadata{Op: apitype.OpImport, URN: urn, Type: TypeLibvirtDomain,
		New: &apitype.StepEventStateMetadata{Type: TypeLibvirtDomain, URN: urn, Inputs: map[string]any{"name": "milner-dev-cp-2"}}}
	read := meta
	read.New = &apitype.StepEventStateMetadata{Type: TypeLibvirtDomain, URN: urn, ID: "0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69"}
	steps := StepsFromEvents([]events.EngineEvent{
		{EngineEvent: apitype.EngineEvent{ResourcePreEvent: &apitype.ResourcePreEvent{Metadata: meta}}},
		{EngineEvent: apitype.EngineEvent{ResOutputsEvent: &apitype.ResOutputsEvent{Metadata: read}}},
	})
	if len(steps) != 1 {
		t.Fatalf("steps = %v, want one", steps)
	}
	if steps[0].Inputs["name"] != "milner-dev-cp-2" || steps[0].ID != "0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69" {
		t.Errorf("step = %+v, want the goal's name and the read id", steps[0])
	}
}
