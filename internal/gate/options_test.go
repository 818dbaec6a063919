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
	if rs := Check(r, nil); len(rs) != 0 {
		t.Fatalf("an option change was refused: %v", rs)
	}
	if out := r.String(); !strings.Contains(out, "options beta-release (kubernetes:helm.sh/v3:Release): retainOnDelete false -> true") {
		t.Fatalf("the report does not name the option change:\n%s", out)
	}
}
