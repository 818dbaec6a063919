package gate

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// Change is one resource the preview changes.
type Change struct {
	// Name is the logical name.
	Name string `json:"name"`
	// Type is the type token.
	Type string `json:"type"`
	// URN is the resource's URN.
	URN string `json:"urn"`
	// Node is the node a node VM or a Talos configuration belongs to ("" otherwise).
	Node string `json:"node,omitempty"`
	// Keys are the properties that force a replace.
	Keys []string `json:"keys,omitempty"`
	// Diffs are the properties that change.
	Diffs []string `json:"diffs,omitempty"`
	// Retained is set when a delete only removes the resource from state.
	Retained bool `json:"retained,omitempty"`
	// ApplyMode is a Talos configuration's planned resolvedApplyMode ("" unknown).
	ApplyMode string `json:"applyMode,omitempty"`
}

// Op is what a preview does to a resource, folded over its steps (a
// replace's create-replacement, replace and delete-replaced are one).
type Op string

// The ops a delta lists, in the order a report prints them.
const (
	Create  Op = "create"
	Update  Op = "update"
	Replace Op = "replace"
	Delete  Op = "delete"
	Import  Op = "import"
)

// Ops are every op, in report order.
var Ops = []Op{Create, Update, Replace, Delete, Import}

// Delta is what a preview changes in one layer: one list of changes per op.
type Delta struct {
	// Layer is the layer.
	Layer Layer `json:"layer"`
	// Changes are the layer's changes by op.
	Changes map[Op][]Change `json:"changes,omitempty"`
}

// Of returns the changes of one op.
func (d Delta) Of(op Op) []Change { return d.Changes[op] }

// Empty reports whether the delta changes nothing.
func (d Delta) Empty() bool {
	for _, cs := range d.Changes {
		if len(cs) > 0 {
			return false
		}
	}
	return true
}

// Report is a preview's delta, grouped by layer.
type Report struct {
	// Stack is the stack the preview ran on.
	Stack string `json:"stack"`
	// Deltas holds one Delta per layer, in Layers order.
	Deltas []Delta `json:"deltas"`
	// Reboots are the nodes whose Talos configuration changes in place: the
	// change may stage a reboot (apply mode staged_if_needing_reboot).
	Reboots []string `json:"reboots,omitempty"`
	// TalosApplies are the nodes whose Talos configuration is created or
	// updated, in report order, each with how its change applies.
	TalosApplies []NodeApply `json:"talosApplies,omitempty"`
	// Options are the resources whose resource options (retainOnDelete,
	// protect) change in state only, each with Diffs naming the options.
	// Applying them changes nothing in the cluster; it is what makes a
	// later delete obey them (the gate reads retainOnDelete from state).
	Options []Change `json:"options,omitempty"`
}

// NodeApply is how one node's Talos configuration change applies.
type NodeApply struct {
	// Node is the node.
	Node string `json:"node"`
	// Mode is the resolvedApplyMode the provider planned or applied:
	// ModeNoReboot, ModeStaged, ModeAuto, or "" when it could not tell in
	// the preview.
	Mode string `json:"mode"`
}

// String says in words how the change applies.
func (a NodeApply) String() string {
	switch a.Mode {
	case ModeNoReboot:
		return a.Node + ": applies live (no_reboot: Talos refuses it rather than reboot)"
	case ModeAuto:
		return a.Node + ": first config, taken as the node boots (auto: a configured node reboots if the change needs it)"
	case ModeStaged:
		return a.Node + ": staged, applies at the node's next reboot (`talosctl -n <node> reboot`, one control plane at a time)"
	case "":
		return a.Node + ": decided when applied (staged if it needs a reboot; the provider could not dry-run it in the preview)"
	default:
		return a.Node + ": " + a.Mode
	}
}

// Delta returns the delta of one layer.
func (r Report) Delta(l Layer) Delta {
	for _, d := range r.Deltas {
		if d.Layer == l {
			return d
		}
	}
	return Delta{Layer: l}
}

// Empty reports whether the preview changes nothing, in the cluster or in
// the resource options recorded in state.
func (r Report) Empty() bool {
	if len(r.Options) > 0 {
		return false
	}
	for _, d := range r.Deltas {
		if !d.Empty() {
			return false
		}
	}
	return true
}

// rank orders the ops a resource's steps fold into: the highest wins
// (a same, read, refresh or discard step ranks 0: nothing changes).
var rank = map[Op]int{Update: 1, Create: 2, Import: 3, Delete: 4, Replace: 5}

// opOf maps an engine op to the op it folds into.
var opOf = map[apitype.OpType]Op{
	apitype.OpCreate:            Create,
	apitype.OpUpdate:            Update,
	apitype.OpDelete:            Delete,
	apitype.OpImport:            Import,
	apitype.OpReplace:           Replace,
	apitype.OpCreateReplacement: Replace,
	apitype.OpDeleteReplaced:    Replace,
	apitype.OpImportReplacement: Replace,
}

// NewReport folds a preview's steps into a report. cluster is the cluster
// name: node VMs are named "<cluster>-<node>", Talos configurations "<node>-apply".
func NewReport(steps []Step, cluster string) Report {
	type entry struct {
		op     Op
		change Change
	}
	byURN := map[string]*entry{}
	var order []string
	var options []Change
	stack := ""
	for _, s := range steps {
		if stack == "" {
			stack = s.Stack()
		}
		e, ok := byURN[s.URN]
		if !ok {
			e = &entry{change: Change{Name: s.Name(), Type: s.Type, URN: s.URN}}
			byURN[s.URN] = e
			order = append(order, s.URN)
		}
		if op, ok := opOf[s.Op]; ok && rank[op] > rank[e.op] {
			e.op = op
		}
		e.change.Keys = union(e.change.Keys, s.Keys)
		e.change.Diffs = union(e.change.Diffs, s.Diffs)
		e.change.Retained = e.change.Retained || s.Retained
		if s.ApplyMode != "" {
			e.change.ApplyMode = s.ApplyMode
		}
		if len(s.Options) > 0 {
			options = append(options, Change{Name: s.Name(), Type: s.Type, URN: s.URN, Diffs: s.Options})
		}
	}

	r := Report{Stack: stack, Options: options, Deltas: make([]Delta, len(Layers))}
	for i, l := range Layers {
		r.Deltas[i].Layer = l
	}
	for _, urn := range order {
		e := byURN[urn]
		c := e.change
		layer := LayerOf(c.Type, c.Name)
		switch {
		case layer == Disposable:
			c.Node = strings.TrimPrefix(c.Name, cluster+"-")
		case c.Type == TypeConfigApply:
			c.Node = strings.TrimSuffix(c.Name, "-apply")
		}
		d := &r.Deltas[slices.Index(Layers, layer)]
		if e.op == "" {
			continue
		}
		if d.Changes == nil {
			d.Changes = map[Op][]Change{}
		}
		d.Changes[e.op] = append(d.Changes[e.op], c)
		if c.Type == TypeConfigApply && (e.op == Create || e.op == Update) {
			r.TalosApplies = append(r.TalosApplies, NodeApply{c.Node, c.ApplyMode})
			if e.op == Update {
				r.Reboots = append(r.Reboots, c.Node)
			}
		}
	}
	slices.Sort(r.Reboots)
	return r
}

// union appends the elements of b missing from a.
func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

// Write prints the report to w, as fmt.Print would (a terminal's write
// error is not the gate's business).
func (r Report) Write(w io.Writer) { _, _ = io.WriteString(w, r.String()) }

// String is the report for a human: every layer with a change, then the
// nodes that may stage a reboot.
func (r Report) String() string {
	var w strings.Builder
	if r.Empty() {
		fmt.Fprintf(&w, "stack %s: no changes\n", r.Stack)
		return w.String()
	}
	fmt.Fprintf(&w, "stack %s: delta by layer\n", r.Stack)
	for _, d := range r.Deltas {
		if d.Empty() {
			continue
		}
		fmt.Fprintf(&w, "\n%s:\n", d.Layer)
		for _, op := range Ops {
			writeChanges(&w, string(op), d.Of(op), op == Replace)
		}
	}
	if len(r.Options) > 0 {
		fmt.Fprintf(&w, "\nresource options (recorded in state; nothing changes in the cluster):\n")
		writeChanges(&w, "options", r.Options, false)
	}
	if len(r.Reboots) > 0 {
		fmt.Fprintf(&w, "\nTalos config changes (may stage a reboot): %s\n", strings.Join(r.Reboots, ", "))
	}
	if len(r.TalosApplies) > 0 {
		fmt.Fprintf(&w, "\nTalos config per node (control planes apply one at a time):\n")
		for _, a := range r.TalosApplies {
			fmt.Fprintf(&w, "  %s\n", a)
		}
	}
	return w.String()
}

// TalosChanged reports whether the Talos layer changes beyond the
// configurations of the nodes named in replaced (a node VM replace alone
// changes nothing in Talos: the node boots its own disk and config) and
// an update of the kubeconfig (its renewal, or the control plane it asks:
// it changes no node, and a renewal with a control plane down must not
// wait on that node's health).
func (r Report) TalosChanged(replaced []string) bool {
	for op, cs := range r.Delta(Talos).Changes {
		for _, c := range cs {
			if c.Type == TypeConfigApply && slices.Contains(replaced, c.Node) {
				continue
			}
			if c.Type == TypeKubeconfig && op == Update {
				continue
			}
			return true
		}
	}
	return false
}

// Staged lists the nodes an update left with a staged configuration,
// pending a reboot: modes is AppliedModes of the update's events.
func Staged(modes map[string]string) []string {
	var out []string
	for urn, mode := range modes {
		if mode == ModeStaged {
			out = append(out, strings.TrimSuffix(Step{URN: urn}.Name(), "-apply"))
		}
	}
	slices.Sort(out)
	return out
}

func writeChanges(w *strings.Builder, verb string, cs []Change, withKeys bool) {
	for _, c := range cs {
		line := fmt.Sprintf("  %-7s %s (%s)", verb, c.Name, c.Type)
		if c.Retained && verb == "delete" {
			line += " retained: leaves state, stays live"
		}
		switch {
		case withKeys && len(c.Keys) > 0:
			line += " forced by " + strings.Join(c.Keys, ", ")
		case len(c.Diffs) > 0:
			line += ": " + strings.Join(c.Diffs, ", ")
		}
		w.WriteString(line + "\n")
	}
}
