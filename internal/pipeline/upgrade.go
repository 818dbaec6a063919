package pipeline

import (
	"errors"
	"fmt"
	"strings"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/upgrade"
)

// upgradeRun is `milner upgrade`'s: the nodes' Talos API and the gate
// options between nodes.
type upgradeRun struct {
	cluster *upgrade.Cluster
	opts    upgrade.Options
	// stopped is why the run stopped before it changed anything.
	stopped error
	// outcome is the upgrade's; upgradeAfter adds the record's to it.
	outcome *Outcome
}

// upgradePlan dials the nodes with the state's talosconfig (or
// --talosconfig) and, unless a dry run, the apps gate between nodes; the
// plan itself is upgrade.Execute's, printed before its confirmation.
func upgradePlan(o *Op) error {
	tc, err := o.talosconfig(o.in.Talosconfig)
	if err != nil {
		return fmt.Errorf("%w (`milner up` writes it to the state; or pass --talosconfig)", err)
	}
	u := &o.upgrade
	if u.cluster, err = upgrade.Connect(o.Ctx, tc, upgrade.FromConfig(o.cfg)); err != nil {
		return err
	}
	u.opts = upgrade.DefaultOptions(o.Out)
	u.opts.DrainTimeout = o.in.DrainTimeout
	if !o.in.DryRun { // a dry run sends nothing, so needs no gate
		if u.opts.Apps, err = o.Apps(true); err != nil {
			return err
		}
	}
	return nil
}

func upgradeReport(o *Op, found []Finding) *Outcome {
	o.upgrade.outcome = &Outcome{Stack: o.St.Name(), Backend: o.St.Backend(), Refusals: found}
	return o.upgrade.outcome
}

// upgradeApply moves the nodes one at a time (upgrade.Execute: its own
// plan, confirmed, each node health-gated). A run that stopped before
// changing anything is a refusal.
func upgradeApply(o *Op, _ *Outcome) error {
	u := &o.upgrade
	var declined error
	err := upgrade.Execute(o.Ctx, u.cluster, u.opts, o.in.DryRun, func(*upgrade.Plan) bool {
		if !o.Yes {
			_, _ = fmt.Fprintln(o.Out, "then: record the nodes' Talos configs in the state (a gated up of those configs only)")
		}
		declined = o.Confirm("Upgrade these nodes, one at a time?")
		return declined == nil
	})
	var stopped *upgrade.StopError
	switch {
	case declined != nil:
		return declined
	case errors.As(err, &stopped) && stopped.NothingChanged():
		u.stopped = err
		return o.judgeWithin("upgrade-health-gate")
	}
	return err
}

// upgradeHealthGate refuses an upgrade that a node's health gate or the
// apps gate stopped before it changed anything.
func upgradeHealthGate(o *Op) ([]gate.Refusal, error) {
	if o.upgrade.stopped == nil {
		return nil, nil
	}
	return nil, &Refusal{Msg: o.upgrade.stopped.Error()}
}

// upgradeAfter records the nodes' configs: UpgradeRecord, through the
// same pipeline.
func upgradeAfter(o *Op) error {
	if o.in.DryRun {
		_, _ = fmt.Fprintln(o.Out, "then: `milner upgrade` records the nodes' Talos configs in the state (a gated up of those configs only)")
		return nil
	}
	_, _ = fmt.Fprintln(o.Out, "\nrecord: the nodes' Talos configs in the state")
	in := o.in
	in.DryRun = false
	rec, err := Run(o, UpgradeRecord(), in)
	o.upgrade.outcome.Record = rec
	return err
}

// recordVerdict is up's verdict, and the record's scope: an empty delta is
// said, and a delta with other changes than the nodes' configs is left to
// `milner up`.
func recordVerdict(o *Op, g *Outcome) error {
	if err := g.Verdict(o.in); err != nil {
		return err
	}
	if g.Report.Empty() {
		_, _ = fmt.Fprintln(o.Out, "record: the state already matches; `milner up` plans no change")
		return errNothingToDo // not even the volumes' file identities (Outcome.Records): `milner up` records them
	}
	if other := notConfigUpdates(g.Report); len(other) > 0 {
		_, _ = fmt.Fprintf(o.Out, "record: skipped: the stack has other changes pending (%s); review them with `milner preview`, then `milner up` records the Talos configs with them\n", strings.Join(other, ", "))
		return errNothingToDo
	}
	return nil
}

// recordApply applies exactly the record's plan.
func recordApply(o *Op, _ *Outcome) error {
	if _, err := o.St.UpPlan(o.Ctx, o.plan.plan); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	_, _ = fmt.Fprintln(o.Out, "record: done; `milner up` plans no change for the upgraded nodes")
	return nil
}

// notConfigUpdates lists the changes of a report other than in-place
// updates of a node's Talos machine config.
func notConfigUpdates(r gate.Report) []string {
	var out []string
	for _, d := range r.Deltas {
		for _, cs := range [][]gate.Change{d.Of(gate.Create), d.Of(gate.Replace), d.Of(gate.Delete), d.Of(gate.Import)} {
			for _, c := range cs {
				out = append(out, c.Name)
			}
		}
		for _, c := range d.Of(gate.Update) {
			if c.Type != gate.TypeConfigApply {
				out = append(out, c.Name)
			}
		}
	}
	return out
}
