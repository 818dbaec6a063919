package status

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/milner/milner/internal/certs"
	"github.com/milner/milner/internal/upgrade"
)

// TestWrite: the text names the stack, counts resources by layer, marks
// a staged node with how to apply its config, and says why a certificate
// could not be read.
func TestWrite(t *testing.T) {
	r := &Report{Stack: "dev", Cluster: "milner", Backend: "file:///s", Resources: map[string]int{"talos": 2, "node VMs": 3}, Protected: 4,
		Nodes:        []any{map[string]any{"name": "cp-1", "role": "controlplane", "address": "10.0.0.1"}, map[string]any{"name": "cp-2", "role": "controlplane", "address": "10.0.0.2"}},
		Staged:       []string{"cp-2"},
		Certificates: []certs.Cert{{Name: "talosconfig client", Err: "no output"}}}
	var b bytes.Buffer
	r.Write(&b)
	assert.Equal(t, `stack dev (cluster milner) on file:///s
  node VMs               3 resources
  talos                  2 resources
  protected              4
nodes:
  cp-1     controlplane  10.0.0.1
  cp-2     controlplane  10.0.0.2  staged per the state: its last config applies at its next reboot (`+"`talosctl -n <node> reboot`"+` applies it); --versions asks the node
certificates (warned within 30 days):
  talosconfig client           unknown: no output
`, b.String())

	var empty bytes.Buffer
	(&Report{Stack: "dev", Cluster: "milner", Backend: "file:///s"}).Write(&empty)
	assert.Equal(t, "stack dev (cluster milner) on file:///s\n  no resources in state\n", empty.String())
}

// TestStagedFromTheNode: with --versions the node says whether a config
// waits for its next reboot, whoever staged it, and the state's record
// gives way to it; a node that could not be asked, or cannot say, leaves
// the state's word, marked as such.
func TestStagedFromTheNode(t *testing.T) {
	for _, tc := range []struct {
		inState bool
		row     *upgrade.Row
		want    string
	}{
		{false, nil, ""},
		{true, nil, "staged per the state: its last config applies at its next reboot"},
		{true, &upgrade.Row{Staged: upgrade.StagedYes}, "staged: the node holds its last config for its next reboot"},
		{false, &upgrade.Row{Staged: upgrade.StagedYes}, "staged outside Milner"},
		{true, &upgrade.Row{Staged: upgrade.StagedNo}, "the node runs that config now"},
		{false, &upgrade.Row{Staged: upgrade.StagedNo}, ""},
		{true, &upgrade.Row{Err: "talos version: connection refused"}, "staged per the state; the node could not be asked"},
		{true, &upgrade.Row{Staged: "not known: this Talos has no persistent MachineConfig"}, "the node cannot say (not known"},
	} {
		r := &Report{}
		if tc.inState {
			r.Staged = []string{"cp-1"}
		}
		if tc.row != nil {
			tc.row.Node = upgrade.Node{Name: "cp-1"}
			r.Versions = &upgrade.Versions{Rows: []upgrade.Row{*tc.row}}
		}
		got := r.stagedNote("cp-1")
		if tc.want == "" {
			assert.Empty(t, got, "in state %v, row %+v", tc.inState, tc.row)
			continue
		}
		assert.Contains(t, got, tc.want, "in state %v, row %+v", tc.inState, tc.row)
	}
}
