package pipeline

import (
	"errors"
	"strings"
	"testing"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
)

// Two nodes replaced in one run are replaced at once by the engine: once a
// cluster runs, that is refused (exit 5) before anything is previewed.
func TestReplaceTakesOneNodePerRunOnARunningCluster(t *testing.T) {
	domains := []engine.Resource{{Type: gate.TypeLibvirtDomain}}
	running := append(domains, engine.Resource{Type: gate.TypeConfigApply})
	for _, c := range []struct {
		name      string
		resources []engine.Resource
		nodes     []string
		refused   bool
	}{
		{"one node, running cluster", running, []string{"cp-2"}, false},
		{"two nodes, no Talos config yet", domains, []string{"cp-1", "cp-2"}, false},
		{"two nodes, running cluster", running, []string{"cp-1", "cp-2"}, true},
	} {
		err := oneNodeAtATime(c.resources, c.nodes)
		var r *Refusal
		if got := errors.As(err, &r); got != c.refused {
			t.Fatalf("%s: refused = %v (%v), want %v", c.name, got, err, c.refused)
		}
		if c.refused && !strings.Contains(err.Error(), "milner up --replace cp-1` first") {
			t.Fatalf("%s: the refusal names no next step: %v", c.name, err)
		}
	}
}
