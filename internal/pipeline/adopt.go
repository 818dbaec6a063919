package pipeline

import (
	"errors"
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/milner/milner/internal/appsadopt"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks/config"
)

// AdoptInput is what `milner adopt` records: one node's VM (Node, ID,
// Holder), every live object (All), or only the bootstrap (Bootstrap).
type AdoptInput struct {
	Node, ID       string
	Holder         bool
	All, Bootstrap bool
}

// adoption is an adopt run's record: what it adopts, with which id, and
// the stack file's bytes before it wrote (nil: it wrote nothing).
type adoption struct {
	what, id string
	before   []byte
	// found is adopt --all's: the live objects the state lacks.
	found guard.Adoption
	// imported: the preview imports something.
	imported bool
	// apps are the apps layer's objects the cluster's answer refuses.
	apps []gate.Refusal
}

// adoptAllLibvirt refuses adopt --all off a libvirt host.
func adoptAllLibvirt(o *Op) ([]gate.Refusal, error) {
	if !o.in.Adopt.All || o.cfg.StartAt == config.LayerApps || (o.cfg.Substrate.Kind == config.KindLibvirt && o.cfg.Declares(config.LayerSubstrate)) {
		return nil, nil
	}
	return nil, Refused("adopt --all reads a libvirt host; on Proxmox adopt each node with --node/--id and --holder (docs/runbooks/adopt.md)")
}

// adoptable is adopt --all's: every live object of the stack that its
// state lacks can be adopted (not another stack's, not a shut-off domain).
// What the stack declares is what its preview, before the edit, declares.
func adoptable(o *Op) ([]gate.Refusal, error) {
	if !o.in.Adopt.All || o.cfg.StartAt == config.LayerApps {
		return nil, nil
	}
	res, _, err := o.St.Preview(o.Ctx, engine.PlanOptions{})
	if err != nil {
		return nil, err
	}
	o.plan = &planned{res: res}
	v, err := o.substrate()
	if err != nil {
		return nil, err
	}
	o.obs.view, o.obs.viewDone = nil, false // the edited stack declares again
	a, notAdopted := guard.Adopt(o.St.Name(), v.declared, v.state, v.live)
	o.adopt.found = a
	return nil, refuseList(notAdopted, "", "%d live objects cannot be adopted (see above); %s is unchanged", len(notAdopted), o.St.File())
}

// adoptPlan records the adoption in the stack file, then the cluster's
// bootstrap by evidence, and previews the edited stack.
func adoptPlan(o *Op) (err error) {
	in, file := o.in.Adopt, o.St.File()
	a := &o.adopt
	a.what, a.id = fmt.Sprintf("node %q", in.Node), in.ID
	switch {
	case in.Bootstrap:
		a.what, a.id = "the bootstrap", "milner:cluster.adoptBootstrap"
	case in.All && o.cfg.StartAt == config.LayerApps:
		return o.adoptApps()
	case in.All:
		a.what = "the live objects"
		if o.cfg.Declares(config.LayerApps) {
			fmt.Fprintf(os.Stderr, "milner adopt: the apps layer of a stack that declares the Talos layer is not adopted here (its kubeconfig is a Talos output, unknown before the next up): see docs/runbooks/recover.md\n")
		}
		if len(a.found.Nodes)+len(a.found.Objects) == 0 {
			_, _ = fmt.Fprintf(o.Out, "milner adopt: every live object of stack %q is in its state or already recorded; nothing to adopt\n", o.St.Name())
			return errNothingToDo
		}
		a.id = fmt.Sprintf("%d domains, %d pools, networks and volumes", len(a.found.Nodes), len(a.found.Objects))
		a.before, err = stackfile.Edit(o.Ctx, o.St, file, stackfile.Adoption(a.found.Nodes, a.found.Objects))
	default:
		field := "adoptId"
		if in.Holder {
			field = "holderAdoptId"
		}
		a.before, err = stackfile.Edit(o.Ctx, o.St, file, stackfile.NodeField(in.Node, field, in.ID))
	}
	if err != nil {
		return err
	}
	if err := o.judgeWithin("adopt-bundle-in-state"); err != nil {
		return err
	}
	wrote, err := o.recordBootstrap()
	if err != nil {
		return err
	}
	if a.before == nil {
		a.before = wrote
	}
	if a.before == nil {
		o.plan = nil
		return nil // somethingToRecord refuses
	}
	res, _, err := o.St.Preview(o.Ctx, engine.PlanOptions{})
	if err != nil {
		return err
	}
	o.plan = &planned{res: res, report: gate.NewReport(res.Steps, o.cfg.Cluster.Name)}
	return nil
}

// adoptApps adopts the apps layer of a stack that starts at it
// (internal/appsadopt: it imports under the stack lock and previews, or
// refuses another chart's release with nothing changed). The import ids
// reach the program through the run options.
func (o *Op) adoptApps() error {
	cluster, err := appsadopt.NewCluster([]byte(o.file.Raw[config.Key(config.KubeconfigKey)]))
	if err != nil {
		return fmt.Errorf("stack %q: milner:%s: %w", o.St.Name(), config.KubeconfigKey, err)
	}
	r, err := appsadopt.Run(o.Ctx, appsadopt.Options{
		Stack: o.St, Cluster: cluster, ProjectDir: o.file.Dir, Out: o.Out,
		SetAdopt: func(ids map[string]string) { o.in.RunOpts.Adopt = ids },
	})
	if err != nil {
		return err
	}
	o.adopt.apps = r.Refusals
	if err := o.judgeWithin("adopt-apps-same-chart"); err != nil {
		return err
	}
	return errNothingToDo
}

// adoptAppsSameChart refuses an apps adoption that would take a release
// the cluster runs from another chart than the stack declares
// (appsadopt.Decide's refusals; nothing was changed).
func adoptAppsSameChart(o *Op) ([]gate.Refusal, error) {
	return nil, refuseList(o.adopt.apps, "%d live objects of the apps layer cannot be adopted",
		"adopting the apps layer of stack %q would take another chart's release (see above); nothing was changed", o.St.Name())
}

// recordBootstrap records milner:cluster.adoptBootstrap in the stack file
// when the cluster's control planes list etcd members and neither its state
// nor its file knows the bootstrap, and says what it found. before is the
// file's previous bytes when it wrote (nil otherwise).
func (o *Op) recordBootstrap() (before []byte, err error) {
	b, ok, err := o.bootstrap()
	switch {
	case err != nil || !ok || b.InState || b.Recorded:
		return nil, err
	case !b.Etcd.Bootstrapped():
		fmt.Fprintf(os.Stderr, "milner adopt: no bootstrap recorded: %s; the next up bootstraps etcd (VMs alone are no evidence: a crash can leave the VMs of a cluster that never was)\n", b.Etcd)
		return nil, nil
	}
	if before, err = stackfile.Edit(o.Ctx, o.St, o.St.File(), stackfile.ClusterFlag("adoptBootstrap")); err != nil {
		return nil, err
	}
	_, _ = fmt.Fprintf(o.Out, "milner adopt: the cluster was bootstrapped (%s): recorded milner:cluster.adoptBootstrap, so the program declares no <cluster>-bootstrap and never bootstraps etcd again\n", b.Etcd)
	return before, nil
}

// adoptBundleInState refuses to adopt on a stack that declares the Talos
// layer, and whose state and stack file do not know its bootstrap, without
// the cluster's secrets bundle in state: only its client certificate can
// ask the control planes for etcd's members (Op.bootstrap).
func adoptBundleInState(o *Op) ([]gate.Refusal, error) {
	_, _, err := o.bootstrap()
	return nil, err
}

// somethingToRecord refuses an adoption that recorded nothing.
func somethingToRecord(o *Op) ([]gate.Refusal, error) {
	if o.adopt.before != nil {
		return nil, nil
	}
	return nil, Refused("nothing to record: the state of stack %q holds its bootstrap, the stack file records it, or no control plane lists etcd members (see above)", o.St.Name())
}

// adoptOneSecretsBundle is oneSecretsBundle for an adoption: the bundle
// rule weighs the libvirt host's live node VMs too.
func adoptOneSecretsBundle(o *Op) ([]gate.Refusal, error) {
	var v *substrateView
	var err error
	if o.cfg.Substrate.Kind == config.KindLibvirt && o.cfg.Declares(config.LayerSubstrate) {
		if v, err = o.substrate(); err != nil {
			return nil, err
		}
	}
	return gate.CheckSecretsBundle(o.plan.res.Steps, liveNodeVMs(v), o.waitingNode, o.St.Name()), nil
}

// adoptReplacesNothing refuses an adoption whose preview replaces or
// deletes anything: the live objects differ from the config.
func adoptReplacesNothing(o *Op) ([]gate.Refusal, error) {
	var bad []gate.Refusal
	for _, s := range o.plan.res.Steps {
		switch s.Op {
		case apitype.OpImport:
			o.adopt.imported = true
		case apitype.OpReplace, apitype.OpCreateReplacement, apitype.OpDeleteReplaced, apitype.OpDelete, apitype.OpImportReplacement:
			bad = append(bad, gate.Refusal{Resource: s.URN, Reason: string(s.Op)})
		}
	}
	return bad, nil
}

// adoptReport prints the edited stack's preview.
func adoptReport(o *Op, found []Finding) *Outcome {
	o.plan.report.Write(o.Out)
	return &Outcome{Stack: o.St.Name(), Backend: o.St.Backend(), Report: o.plan.report, Refusals: found}
}

// adoptVerdict refuses in the words of each rule: the bundle's findings
// listed, the replaces and deletes named; the stack file is put back.
func adoptVerdict(o *Op, g *Outcome) error {
	a, file := o.adopt, o.St.File()
	var bundle []gate.Refusal
	var bad []string
	for _, f := range g.Refusals {
		if f.Rule == "adopt-one-secrets-bundle" {
			bundle = append(bundle, f.Refusal)
		} else {
			bad = append(bad, f.Reason+" "+f.Resource)
		}
	}
	if err := refuseList(bundle, "", "adopting %s would create a new cluster secrets bundle beside the cluster's nodes (see above); %s is unchanged", a.what, file); err != nil {
		return named(err, "adopt-one-secrets-bundle")
	}
	if len(bad) > 0 {
		return named(Refused("adopting %s (%s) would plan %v; the live objects differ from the config (fix the config or the objects, then adopt again); %s is unchanged", a.what, a.id, bad, file), "adopt-replaces-nothing")
	}
	return nil
}

// adoptApply keeps the record and says what the next up does.
func adoptApply(o *Op, _ *Outcome) error {
	a := o.adopt
	if o.in.Adopt.Bootstrap {
		return nil // recordBootstrap said what it recorded
	}
	if !a.imported {
		_, _ = fmt.Fprintf(o.Out, "milner adopt: %s already in the state of stack %q; recorded %s in %s (no import needed)\n", a.what, o.St.Name(), a.id, o.St.File())
		return nil
	}
	_, _ = fmt.Fprintf(o.Out, "milner adopt: %s will be imported (%s) by the next `milner up --stack %s`; the preview plans no replace and no delete. Recorded in %s: commit it.\n", a.what, a.id, o.St.Name(), o.St.File())
	return nil
}

// adoptUndo restores the stack file as it was: anything but a clean
// adoption leaves it unchanged.
func adoptUndo(o *Op, cause error) error {
	if o.adopt.before == nil {
		return cause
	}
	file := o.St.File()
	if werr := stackfile.Restore(o.Ctx, o.St, file, o.adopt.before); werr != nil {
		return errors.Join(cause, fmt.Errorf("restore %s: %w", file, werr))
	}
	return cause
}
