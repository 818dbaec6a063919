package gate

import (
	"encoding/json"
	"errors"
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
	// Options are the resource options a "same" step changes in state
	// (retainOnDelete, protect): nothing changes in the cluster, but only an
	// update records them, and a later delete obeys the recorded ones.
	Options []string
	// ApplyMode is a Talos configuration's resolvedApplyMode as the preview
	// planned it: "auto" (live), "staged" (pending until the node reboots),
	// or "" when the provider could not tell (e.g. no dry run possible).
	ApplyMode string
	// Inputs are the goal's inputs (the new state's; nil for a delete),
	// secrets masked: the guards read each create's names from them.
	Inputs map[string]any
	// ID is the provider id the step ends with: the recorded id of a same
	// or update, and of an import the id the preview read the live object
	// under (its ResOutputsEvent); "" for a create in a preview.
	ID string
}

// resolvedApplyMode is the talos ConfigurationApply output that says how a
// change was (or will be) applied.
const resolvedApplyMode = "resolvedApplyMode"

// applyModeOf reads resolvedApplyMode from a step's new state; "" when it is
// absent or unknown. A preview's output is often unknown, but a mode the
// program sends (internal/applymode: anything but staged_if_needing_reboot)
// is the one the provider applies: terraform-provider-talos v0.10.1
// handleRebootPrevention resolves any other mode to itself, without a dry
// run.
func applyModeOf(st *apitype.StepEventStateMetadata) string {
	if st == nil {
		return ""
	}
	// Anything else (the engine's unknown sentinel in a preview) is unknown.
	known := func(mode string) bool {
		return mode == ModeAuto || mode == ModeStaged || mode == ModeNoReboot || mode == "reboot"
	}
	if mode, _ := st.Outputs[resolvedApplyMode].(string); known(mode) {
		return mode
	}
	if mode, _ := st.Inputs["applyMode"].(string); known(mode) {
		return mode
	}
	return ""
}

// The apply modes milner sends (internal/applymode) and
// staged_if_needing_reboot resolves to.
const (
	// ModeNoReboot applies the change live; Talos refuses it rather than reboot.
	ModeNoReboot = "no_reboot"
	// ModeAuto applies the change now (live, or with a reboot when it needs
	// one): milner sends it only for a first config.
	ModeAuto = "auto"
	// ModeStaged writes the change and applies it at the node's next reboot.
	ModeStaged = "staged"
)

// AppliedModes returns, by URN, the resolvedApplyMode of every Talos
// configuration an update applied, from its resource-outputs events.
func AppliedModes(evs []events.EngineEvent) map[string]string {
	out := map[string]string{}
	for _, ev := range evs {
		o := ev.ResOutputsEvent
		if o == nil || o.Metadata.Type != TypeConfigApply {
			continue
		}
		if mode := applyModeOf(o.Metadata.New); mode != "" {
			out[o.Metadata.URN] = mode
		}
	}
	return out
}

// Name is the logical name of the step's resource.
func (s Step) Name() string { return resource.URN(s.URN).Name() }

// Stack is the stack of the step's resource.
func (s Step) Stack() string { return string(resource.URN(s.URN).Stack()) }

// StepsFromEvents keeps the step of every ResourcePreEvent, in order, with
// the id its ResOutputsEvent reports, and marks the steps a
// ResOpFailedEvent reports as failed. Other events (diagnostics,
// summaries) say nothing about what will change. It is the one fold of
// engine events: the gate's, the guards' and the engine's.
func StepsFromEvents(evs []events.EngineEvent) []Step {
	var steps []Step
	for _, ev := range evs {
		if o := ev.ResOutputsEvent; o != nil && o.Metadata.New != nil {
			if i := lastStep(steps, o.Metadata.URN, o.Metadata.Op); i >= 0 && steps[i].ID == "" {
				steps[i].ID = o.Metadata.New.ID
			}
			continue
		}
		if f := ev.ResOpFailedEvent; f != nil {
			if i := lastStep(steps, f.Metadata.URN, f.Metadata.Op); i >= 0 {
				steps[i].Failed = true
			}
			continue
		}
		pre := ev.ResourcePreEvent
		if pre == nil {
			continue
		}
		m := pre.Metadata
		var inputs map[string]any
		id := ""
		if m.New != nil {
			inputs, id = m.New.Inputs, m.New.ID
		}
		steps = append(steps, Step{
			Inputs:    inputs,
			ID:        id,
			Op:        m.Op,
			URN:       m.URN,
			Type:      m.Type,
			Keys:      slices.Clone(m.Keys),
			Diffs:     slices.Clone(m.Diffs),
			Retained:  m.Old != nil && m.Old.RetainOnDelete,
			ApplyMode: applyModeOf(m.New),
			Options:   optionChanges(m),
		})
	}
	return steps
}

// lastStep is the index of the last step of urn and op, or -1.
func lastStep(steps []Step, urn string, op apitype.OpType) int {
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].URN == urn && steps[i].Op == op {
			return i
		}
	}
	return -1
}

// optionChanges lists the resource options a "same" step changes between
// the recorded state and the program's goal (the engine's step metadata
// carries both, pkg/v3 engine/events.go makeStepEventStateMetadata).
func optionChanges(m apitype.StepEventMetadata) []string {
	if m.Op != apitype.OpSame || m.Old == nil || m.New == nil {
		return nil
	}
	var out []string
	if m.Old.RetainOnDelete != m.New.RetainOnDelete {
		out = append(out, fmt.Sprintf("retainOnDelete %v -> %v", m.Old.RetainOnDelete, m.New.RetainOnDelete))
	}
	if m.Old.Protect != m.New.Protect {
		out = append(out, fmt.Sprintf("protect %v -> %v", m.Old.Protect, m.New.Protect))
	}
	return out
}

// ReadEvents decodes a recorded event stream: one JSON apitype.EngineEvent a
// line, the format of `pulumi preview --event-log` and of the Automation
// API's event channel.
func ReadEvents(r io.Reader) ([]events.EngineEvent, error) {
	var evs []events.EngineEvent
	for dec := json.NewDecoder(r); ; {
		var ev apitype.EngineEvent
		err := dec.Decode(&ev)
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", len(evs)+1, err)
		}
		evs = append(evs, events.EngineEvent{EngineEvent: ev})
	}
}
