package status

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/milner/milner/internal/certs"
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
  cp-2     controlplane  10.0.0.2  staged: its last config applies at its next reboot (`+"`talosctl -n <node> reboot`"+`)
certificates (warned within 30 days):
  talosconfig client           unknown: no output
`, b.String())

	var empty bytes.Buffer
	(&Report{Stack: "dev", Cluster: "milner", Backend: "file:///s"}).Write(&empty)
	assert.Equal(t, "stack dev (cluster milner) on file:///s\n  no resources in state\n", empty.String())
}
