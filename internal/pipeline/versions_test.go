package pipeline

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/milner/milner/internal/gate"
)

// What the version interlock and the upgrade's record look at in a report.
func TestConfigUpdatesInAReport(t *testing.T) {
	apply := func(node string) gate.Change {
		return gate.Change{Name: node + "-apply", Type: gate.TypeConfigApply, Node: node}
	}
	onlyConfigs := gate.Report{Deltas: []gate.Delta{{Layer: gate.Talos, Changes: map[gate.Op][]gate.Change{gate.Update: {apply("cp-1"), apply("w-1")}}}}}
	assert.True(t, configUpdated(onlyConfigs, nil))
	assert.True(t, configUpdated(onlyConfigs, []string{"cp-1"}), "w-1 is still updated")
	assert.Empty(t, notConfigUpdates(onlyConfigs), "the record may apply it")

	newNode := gate.Report{Deltas: []gate.Delta{{Layer: gate.Talos, Changes: map[gate.Op][]gate.Change{gate.Create: {apply("w-2")}}}}}
	assert.False(t, configUpdated(newNode, nil), "a new node installs at the declared versions")
	assert.Equal(t, []string{"w-2-apply"}, notConfigUpdates(newNode))

	replaced := gate.Report{Deltas: []gate.Delta{{Layer: gate.Talos, Changes: map[gate.Op][]gate.Change{gate.Replace: {apply("cp-2")}}}}}
	assert.False(t, configUpdated(replaced, []string{"cp-2"}), "the replaced VM's config is its install")

	mixed := gate.Report{Deltas: []gate.Delta{
		{Layer: gate.Talos, Changes: map[gate.Op][]gate.Change{gate.Update: {apply("cp-1")}}},
		{Layer: gate.Apps, Changes: map[gate.Op][]gate.Change{gate.Update: {{Name: "vault", Type: "kubernetes:helm.sh/v3:Release"}}}},
	}}
	assert.Equal(t, []string{"vault"}, notConfigUpdates(mixed), "the record leaves other changes to up")
}
