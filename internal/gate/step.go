package gate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
)

// Step is one step of a preview, as much of it as the gate reads.
type Step struct {
	// Op is the engine's operation: same, create, update, replace, ...
	Op apitype.OpType
	// URN is the resource's URN.
	URN string
	// Type is the resource's type token.
	Type string
	// Keys are the properties that force a replacement.
	Keys []string
	// Diffs are the properties that change.
	Diffs []string
	// Retained is set when the resource is retained on delete: deleting it
	// only removes it from state and leaves it live.
	Retained bool
	// Failed is set when the engine reported the step as failed (an up).
	Failed bool
}

// Name is the logical name of the step's resource.
func (s Step) Name() string { return resource.URN(s.URN).Name() }

// Stack is the stack of the step's resource.
func (s Step) Stack() string { return string(resource.URN(s.URN).Stack()) }

// StepsFromEvents keeps the step of every ResourcePreEvent, in order, and
// marks the steps a ResOpFailedEvent reports as failed. Other events
// (outputs, diagnostics, summaries) say nothing about what will change.
// It is the one fold of engine events: the gate's and the engine's.
func StepsFromEvents(evs []events.EngineEvent) []Step {
	var steps []Step
	for _, ev := range evs {
		if f := ev.ResOpFailedEvent; f != nil {
			for i := len(steps) - 1; i >= 0; i-- {
				if steps[i].URN == f.Metadata.URN && steps[i].Op == f.Metadata.Op {
					steps[i].Failed = true
					break
				}
			}
			continue
		}
		pre := ev.ResourcePreEvent
		if pre == nil {
			continue
		}
		m := pre.Metadata
		steps = append(steps, Step{
			Op:       m.Op,
			URN:      m.URN,
			Type:     m.Type,
			Keys:     slices.Clone(m.Keys),
			Diffs:    slices.Clone(m.Diffs),
			Retained: m.Old != nil && m.Old.RetainOnDelete,
		})
	}
	return steps
}

// ReadEvents decodes a recorded event stream: one JSON apitype.EngineEvent a
// line, the format of `pulumi preview --event-log` and of the Automation
// API's event channel.
func ReadEvents(r io.Reader) ([]events.EngineEvent, error) {
	var evs []events.EngineEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var ev apitype.EngineEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("event line %d: %w", line, err)
		}
		evs = append(evs, events.EngineEvent{EngineEvent: ev})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return evs, nil
}
