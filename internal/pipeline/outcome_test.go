package pipeline

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/upgrade"
)

// TestOutcomeJSON: a gated verb's --json result decodes back, strictly,
// into the Outcome it printed (a node of the versions table by its name),
// and every key in it is camelCase as in every other verb's result, the
// report's too (it printed Go's field names, Deltas and TalosApplies,
// until the upgrade scenario decoded it).
func TestOutcomeJSON(t *testing.T) {
	applied := Outcome{
		Stack: "dev", Backend: "file:///state", Applied: true,
		Report: gate.Report{Stack: "dev",
			Deltas:       []gate.Delta{{Layer: gate.Talos, Changes: map[gate.Op][]gate.Change{gate.Update: {{Name: "cp-1-apply", Type: gate.TypeConfigApply, URN: "urn:x", Node: "cp-1", Diffs: []string{"configPatches"}, ApplyMode: gate.ModeNoReboot}}}}},
			TalosApplies: []gate.NodeApply{{Node: "cp-1", Mode: gate.ModeNoReboot}}},
		Versions: upgrade.Versions{Rows: []upgrade.Row{{Node: upgrade.Node{Name: "cp-1"}, Talos: "v1.13.9", Staged: upgrade.StagedNo}}},
	}
	o := Outcome{Stack: "dev", Applied: true, Record: &applied}
	b, err := json.Marshal(o)
	require.NoError(t, err)

	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var back Outcome
	require.NoError(t, dec.Decode(&back), string(b))
	assert.Equal(t, o, back)

	for _, k := range regexp.MustCompile(`"([A-Za-z]+)":`).FindAllStringSubmatch(string(b), -1) {
		assert.Regexp(t, `^[a-z]`, k[1], "a key of %s", b)
	}
}

// TestVersionsOfANewNode: a node whose VM the plan creates, which could
// not be asked, is "not created yet" in the versions table, not
// "unreachable" with the dial's error (the prod preview of an added
// worker showed "connection refused"); a node that exists and does not
// answer stays unreachable, and what answers at a new node's address is
// shown as it answered.
func TestVersionsOfANewNode(t *testing.T) {
	r := gate.Report{Deltas: []gate.Delta{{Layer: gate.Disposable, Changes: map[gate.Op][]gate.Change{
		gate.Create: {{Name: "w-2", Node: "w-2"}, {Name: "boot-media"}},
	}}}}
	refused := "talos version: connection refused"
	maintenance := "maintenance mode: not configured yet (milner up applies its first config)"
	rows := []upgrade.Row{
		{Node: upgrade.Node{Name: "cp-1"}, Talos: "v1.13.9"},
		{Node: upgrade.Node{Name: "w-1"}, Err: refused, NoAnswer: true},
		{Node: upgrade.Node{Name: "w-2"}, Err: refused, NoAnswer: true},
		{Node: upgrade.Node{Name: "w-3"}, Err: maintenance}, // something answers at a new node's address
	}
	r.Deltas[0].Changes[gate.Create] = append(r.Deltas[0].Changes[gate.Create], gate.Change{Name: "w-3", Node: "w-3"})
	got := created(r, rows)
	assert.Equal(t, []string{"", refused, upgrade.NotCreatedYet, maintenance}, []string{got[0].Err, got[1].Err, got[2].Err, got[3].Err})
	assert.Equal(t, refused, rows[2].Err, "the observed rows are not changed")

	var b bytes.Buffer
	upgrade.Versions{Rows: got}.Write(&b)
	assert.Regexp(t, `(?m)^w-2\s+not created yet`, b.String())
	assert.Regexp(t, `(?m)^w-1\s+unreachable: `+refused, b.String())
}
