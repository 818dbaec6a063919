package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/milner/milner/internal/apiready"
	"github.com/milner/milner/internal/clientfiles"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
)

// Input is what the command line asks of a gated run.
type Input struct {
	// Replace are the nodes named with --replace.
	Replace []string
	// Remove is the node named with --remove: taken out of the cluster and
	// its VM deleted, its volumes retained on the host (remove.go).
	Remove string
	// DrainTimeout is --drain-timeout: how long the drain of a removed
	// node, or of a node upgraded from v1.13 on, may take (zero: 5
	// minutes, talosctl's).
	DrainTimeout time.Duration
	// Refresh is --refresh: every resource read back first.
	Refresh bool
	// ExpectNoChanges is --expect-no-changes.
	ExpectNoChanges bool
	// OSDisk is up's --os-disk.
	OSDisk bool
	// AllowContract is up's --allow-contract-change.
	AllowContract bool
	// AcceptRecreated are the volumes (logical names) named with
	// --accept-recreated: their file, recreated at its path, is recorded
	// as theirs instead of refused.
	AcceptRecreated []string
	// Talosconfig is --talosconfig ("" the state's, else the user's).
	Talosconfig string
	// JSON is --json: the report is not printed as text.
	JSON bool
	// DryRun is upgrade's --dry-run: the plan, nothing sent.
	DryRun bool
	// Adopt is adopt's record.
	Adopt AdoptInput
	// ConfirmName is teardown's deprecated --confirm <cluster>.
	ConfirmName string
	// RunOpts are the program's per-run options: the apply modes decided
	// for the plan, the health check the apply runs.
	RunOpts *stacks.RunOptions
}

// errNothingToDo ends a run without an error: there is nothing to apply
// (adopt --all with nothing to adopt, upgrade's record with other changes).
var errNothingToDo = errors.New("nothing to do")

// Outcome is a gated run's result, as --json prints it.
type Outcome struct {
	Stack    string      `json:"stack"`
	Backend  string      `json:"backend"`
	Report   gate.Report `json:"report"`
	Refusals []Finding   `json:"refusals"`
	Applied  bool        `json:"applied"`
	// Staged are the nodes whose applied Talos config waits for a reboot.
	Staged []string `json:"staged,omitempty"`
	// Lagging are the nodes that run other versions than declared.
	Lagging []string `json:"lagging,omitempty"`
	// VersionsNote says why the nodes' versions are not known ("" when they are).
	VersionsNote string `json:"versionsNote,omitempty"`
	// Versions is the versions table the text prints.
	Versions upgrade.Versions `json:"versions"`
	// Mirrored are the charts fetched through milner:chartMirrors.
	Mirrored []config.MirroredChart `json:"mirrored,omitempty"`
	// Records are the volumes whose file identity the up records in state
	// (Op.recordsIdentities): nothing changes on the host, but an up
	// applies for them even when the report has no change.
	Records []string `json:"records,omitempty"`
	// Pulumi is, under --json, what Pulumi's own --json prints for the
	// verb's engine operation, unchanged (engine.Result.JSON): the preview
	// digest of its plan (`pulumi preview --json`), or for teardown the
	// destroy's engine events; absent when the verb ran neither.
	Pulumi json.RawMessage `json:"pulumi,omitempty"`
	// Record is upgrade's record: the gated up of the nodes' Talos
	// configs that follows the upgrade (UpgradeRecord).
	Record *Outcome `json:"record,omitempty"`
}

// planned is the plan stage's result: the engine's preview, its plan
// (which the apply takes, exactly), and the report of its steps.
type planned struct {
	res    *engine.Result
	plan   *engine.Plan
	report gate.Report
	// targets are the URNs the preview was asked to replace.
	targets []string
}

// Run is the one entry point: it runs a verb's stages on an open stack.
// observe (on first use, observe.go) and judge the Before rules; plan;
// judge the Stop and Report rules; report; the verdict (refusals, or
// --expect-no-changes); then, when the verb applies and the delta is not
// empty, confirm, judge the Last rules, apply exactly the reviewed plan,
// and run the after-steps. The outcome is nil when the run stopped before
// its report.
func Run(o *Op, v Verb, in Input) (g *Outcome, err error) {
	o.in, o.rules = in, v.Rules
	if in.RunOpts != nil {
		// milner's gate judges every preview whole, every refusal named;
		// the program's lifecycle hooks hold in its updates.
		in.RunOpts.Lifecycle.Gated = true
	}
	// teardown's deprecated --confirm <cluster> is --yes once
	// teardownClusterName passed.
	o.Yes = o.Yes || in.ConfirmName != ""
	defer o.closeObservations()
	defer func() {
		if errors.Is(err, errNothingToDo) {
			err = nil
		}
	}()
	if v.undo != nil {
		defer func() {
			if err != nil {
				err = v.undo(o, err)
			}
		}()
	}
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings {
		if !o.warned {
			fmt.Fprintf(os.Stderr, "milner: warning: %s\n", w)
		}
	}
	o.warned = true
	if _, err := judge(o, v.Rules, Before); err != nil {
		return nil, err
	}
	if err := v.plan(o); err != nil {
		return nil, err
	}
	found, err := judge(o, v.Rules, Stop, Report)
	if err != nil {
		return nil, err
	}
	g = v.report(o, found)
	if in.JSON && o.plan != nil && o.plan.res != nil {
		if g.Pulumi, err = o.plan.res.JSON(); err != nil {
			return g, err
		}
	}
	verdict := v.verdict
	if verdict == nil {
		verdict = func(o *Op, g *Outcome) error { return g.Verdict(o.in) }
	}
	if err := verdict(o, g); err != nil || v.apply == nil || (g.Report.Empty() && len(g.Records) == 0 && !v.whenEmpty) {
		return g, err
	}
	if v.question != "" {
		if err := o.Confirm(v.question); err != nil {
			return g, err
		}
	}
	if _, err := judge(o, v.Rules, Last); err != nil {
		return g, err
	}
	if err := v.apply(o, g); err != nil {
		return g, err
	}
	g.Applied = !in.DryRun
	if v.after == nil {
		return g, nil
	}
	return g, v.after(o)
}

// outcome is the report stage of the previewing verbs: the delta by
// layer, the mirrored charts, each node's versions and the refusals,
// printed as text unless --json.
func outcome(o *Op, found []Finding) *Outcome {
	g := &Outcome{Stack: o.St.Name(), Backend: o.St.Backend(), Report: o.plan.report, Refusals: found,
		Mirrored: o.cfg.Mirrored(), Versions: o.versions(), Records: o.recordsIdentities()}
	g.Versions.Rows = created(o.plan.report, g.Versions.Rows)
	g.Lagging, g.VersionsNote = upgrade.Lagging(g.Versions.Declared, g.Versions.Rows), g.Versions.Note
	if !o.in.JSON {
		g.Write(o.Out)
	}
	return g
}

// created returns rows with each node whose VM the report creates, and
// at whose address nothing answered, said so (upgrade.NotCreatedYet)
// instead of the dial's error ("connection refused" read as a broken
// node). What answers there (maintenance mode, another machine) is shown
// as it answered.
func created(r gate.Report, rows []upgrade.Row) []upgrade.Row {
	creates := map[string]bool{}
	for _, c := range r.Delta(gate.Disposable).Of(gate.Create) {
		creates[c.Node] = c.Node != ""
	}
	out := slices.Clone(rows)
	for i, row := range out {
		if row.NoAnswer && creates[row.Node.Name] {
			out[i].Err = upgrade.NotCreatedYet
		}
	}
	return out
}

// planPreview is the plan stage: the preview's options (--refresh, the
// URNs of the VMs --replace names and, with --os-disk, that node's OS
// volume and config apply, whose protection is lifted for the run), the
// apply modes and the kubeconfig's control plane decided for the plan, and
// the engine's preview with a plan.
func (o *Op) planPreview() error {
	opts := engine.PlanOptions{Refresh: o.in.Refresh}
	for _, n := range o.in.Replace {
		vm, err := o.nodeVM(n)
		if err != nil {
			return err
		}
		opts.Replace = append(opts.Replace, string(vm.URN)) // replaceInState judged it there
	}
	targets, err := o.osDiskTargets()
	if err != nil {
		return err
	}
	opts.Replace = append(opts.Replace, targets...)
	retained, err := o.retainRemoved()
	if err != nil {
		return err
	}
	if o.in.RunOpts != nil {
		// The replaces the gate lets through (the --os-disk node's OS
		// volume) and the removed node's volumes, dropped from state and
		// kept on the host, pass the lifecycle hooks too.
		o.in.RunOpts.Lifecycle.Allowed = slices.Concat(opts.Replace, retained)
	}
	if err := o.unprotectOSVolume(); err != nil {
		return err
	}
	if err := o.applyModes(); err != nil {
		return err
	}
	if err := o.kubeconfigNode(); err != nil {
		return err
	}
	res, plan, err := o.St.Preview(o.Ctx, opts)
	if err != nil && (res == nil || !errors.Is(err, engine.ErrPolicyViolations)) {
		return err
	}
	// A preview the policy pack failed is reported whole, its violations
	// refused by the policy-pack rule; it has no plan to apply.
	o.plan = &planned{res: res, plan: plan, report: gate.NewReport(res.Steps, o.cfg.Cluster.Name), targets: opts.Replace}
	return nil
}

// apply is the apply stage: each replaced node shut down (and, with
// --os-disk, its etcd member removed), then exactly the reviewed plan.
func applyPlan(o *Op, g *Outcome) error {
	// The cluster health check runs only when the Talos layer changes
	// beyond the replaced nodes: a dead node never blocks its own recovery.
	o.in.RunOpts.SkipHealthCheck = !g.Report.TalosChanged(o.in.Replace)
	var err error
	if o.in.RunOpts.AwaitAPIServer, err = o.awaitAPIServers(g.Report); err != nil {
		return err
	}
	if err := o.shutdownReplaced(); err != nil {
		return err
	}
	if err := o.takeOut(); err != nil {
		return err
	}
	result, err := o.St.UpPlan(o.Ctx, o.plan.plan)
	if err != nil {
		return err
	}
	g.Applied, o.obs.removedApplied = true, true
	if g.Staged = gate.Staged(gate.AppliedModes(result.Events)); len(g.Staged) > 0 {
		_, _ = fmt.Fprintf(o.Out, "milner up: Talos config staged, pending a reboot of: %s (reboot them one at a time)\n", strings.Join(g.Staged, ", "))
	}
	return nil
}

// Write prints the report, the mirrored charts, the versions and the refusals.
func (g *Outcome) Write(out io.Writer) {
	g.Report.Write(out)
	if len(g.Mirrored) > 0 {
		_, _ = fmt.Fprintf(out, "\ncharts fetched through milner:chartMirrors (the stack pins the published source):\n")
		for _, m := range g.Mirrored {
			_, _ = fmt.Fprintf(out, "  %s: %s -> %s\n", m.App, m.Published, m.Fetch)
		}
	}
	if len(g.Records) > 0 {
		_, _ = fmt.Fprintf(out, "\nthe up records in state (nothing changes on the host): the file identity of volume %s\n", strings.Join(g.Records, ", "))
	}
	g.Versions.Write(out)
	if len(g.Refusals) > 0 {
		_, _ = fmt.Fprintf(out, "\nrefused by the layer rules (%d):\n", len(g.Refusals))
		for _, r := range g.Refusals {
			_, _ = fmt.Fprintf(out, "  - %s\n", r)
		}
	}
}

// Verdict turns an outcome into the command's error: refusals first,
// then pending changes under --expect-no-changes.
func (g *Outcome) Verdict(in Input) error {
	switch {
	case len(g.Refusals) > 0:
		var rules []string
		for _, r := range g.Refusals {
			if !slices.Contains(rules, r.Rule) {
				rules = append(rules, r.Rule)
			}
		}
		return &Refusal{Rule: strings.Join(rules, ", "), Msg: fmt.Sprintf("the preview breaks %d layer rules; nothing was applied", len(g.Refusals))}
	case in.ExpectNoChanges && !g.Report.Empty():
		return fmt.Errorf("stack %q: %w (--expect-no-changes)", g.Stack, ErrPending)
	}
	return nil
}

// awaitAPIServers is the wait between two control planes' applies
// (internal/apiready) for the nodes whose Talos config the reviewed plan
// updates, asked with the stack's kubeconfig. nil when the plan updates
// none, or when the state holds no kubeconfig yet (a first bring-up: no
// API server runs before the bootstrap, which follows every apply).
func (o *Op) awaitAPIServers(r gate.Report) (func(string, netip.Addr) error, error) {
	updated := map[string]bool{}
	for _, c := range r.Delta(gate.Talos).Of(gate.Update) {
		if c.Type == gate.TypeConfigApply {
			updated[c.Node] = true
		}
	}
	if len(updated) == 0 {
		return nil, nil
	}
	outs, err := o.Outputs()
	if err != nil {
		return nil, err
	}
	kube, _ := outs[clientfiles.Kube.Output].(string)
	if kube == "" {
		return nil, nil
	}
	tc, err := o.appliedTalosconfig(o.in.Talosconfig)
	if err != nil {
		return nil, fmt.Errorf("the wait between control planes asks each one's Talos API: %w", err)
	}
	opts := apiready.Defaults
	opts.Out = o.Out
	ctx := o.Ctx
	return func(node string, addr netip.Addr) error {
		if !updated[node] {
			return nil
		}
		return apiready.Wait(ctx, []byte(kube), apiready.Node{
			Name:          node,
			API:           netip.AddrPortFrom(addr, apiready.Port),
			ConfigVersion: apiready.TalosConfigVersion(tc, netip.AddrPortFrom(addr, constants.ApidPort).String()),
		}, opts)
	}, nil
}
