package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	pkgengine "github.com/pulumi/pulumi/pkg/v3/engine"
	"github.com/pulumi/pulumi/pkg/v3/resource/deploy"
	pkgpassphrase "github.com/pulumi/pulumi/pkg/v3/secrets/passphrase"
	pkgworkspace "github.com/pulumi/pulumi/pkg/v3/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/esc"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/stackfile"
)

// Result is what one operation did (or, for a preview, would do).
type Result struct {
	// Steps are the engine's resource steps in the order it reported them,
	// "same" steps included.
	Steps []gate.Step
	// Summary counts resources per operation ("same", "create", "replace", ...).
	Summary map[string]int
	// Events are every engine event, for assertions Steps does not cover.
	Events []events.EngineEvent
	// Violations are the policy pack's mandatory violations
	// (internal/policypack), in the order the engine reported them.
	Violations []Violation
	// raw are a preview's engine events as the engine sent them (Digest).
	raw []pkgengine.Event
}

// Violation is one mandatory violation of a policy of the stack's policy
// pack: the engine fails the operation on it.
type Violation struct {
	// Policy is the policy's name: the rule a refusal names.
	Policy string `json:"policy"`
	// URN is the resource that violates it.
	URN string `json:"urn"`
	// Message is the policy's description and the violation, as the
	// engine prints them.
	Message string `json:"message"`
}

// ErrPolicyViolations is wrapped by an operation's error when the policy
// pack reported a mandatory violation (the Result's Violations).
var ErrPolicyViolations = errors.New("policy violations")

// Changes returns the steps that change something: every step but "same"
// and the reads a refresh does of unchanged resources.
func (r *Result) Changes() []gate.Step {
	var out []gate.Step
	for _, st := range r.Steps {
		if st.Op == apitype.OpSame || (st.Op == apitype.OpRefresh && len(st.Diffs) == 0) {
			continue
		}
		out = append(out, st)
	}
	return out
}

// Plan is a preview's update plan: an up given it does exactly what the
// preview showed, or fails without doing the rest.
type Plan struct {
	plan    *deploy.Plan
	replace []string
}

// PlanOptions configure a preview whose plan an up then applies.
type PlanOptions struct {
	// Replace are URNs the engine replaces even though nothing changed
	// (the node VMs named with `milner up --replace`).
	Replace []string
	// Refresh reads every resource back from its provider first.
	Refresh bool
}

// Preview previews (with Refresh, every resource read back first) and
// returns the plan UpPlan applies.
func (s *Stack) Preview(ctx context.Context, o PlanOptions) (*Result, *Plan, error) {
	r, p, err := s.run(ctx, apitype.PreviewUpdate, func(e *pkgengine.UpdateOptions) {
		e.Refresh = o.Refresh
		// No provider Diff after each refresh Read: the preview's own Diff of
		// the refreshed state follows for every resource of the program, and
		// the refresh step's diff is never reported in a preview (its
		// ResourcePreEvent is sent before the Read; pkg/v3
		// resource/deploy/step.go RefreshStep.Apply, engine/update.go
		// previewActions.OnResourceStepPre). One Diff RPC per resource less,
		// as `pulumi preview --refresh` with PULUMI_ENABLE_LEGACY_REFRESH_DIFF.
		// Refresh (`milner refresh`, which writes state) is left as it was.
		e.UseLegacyRefreshDiff = o.Refresh
		e.GeneratePlan = true
		e.ReplaceTargets = deploy.NewUrnTargets(o.Replace)
	})
	if p != nil {
		return r, &Plan{plan: p, replace: o.Replace}, err
	}
	return r, nil, err
}

// UpPlan applies exactly the plan Preview returned: the engine fails a
// step the plan does not hold rather than take it.
func (s *Stack) UpPlan(ctx context.Context, p *Plan) (*Result, error) {
	return s.apply(ctx, apitype.UpdateUpdate, func(e *pkgengine.UpdateOptions) {
		e.Plan = p.plan
		e.ReplaceTargets = deploy.NewUrnTargets(p.replace)
	})
}

// Up applies the program: creates, updates, replaces and deletes until the
// stack matches it.
func (s *Stack) Up(ctx context.Context) (*Result, error) {
	return s.apply(ctx, apitype.UpdateUpdate, func(*pkgengine.UpdateOptions) {})
}

// UpTarget applies the program to one top-level resource, typ and name,
// alone (`pulumi up --target`): the engine steps nothing else of the
// program, deletes nothing the program leaves out, and only the providers
// and the stack resource follow it (pkg/v3 v3.276.0 step_generator.go:
// isImplicitlyTargetedResource). `milner secrets import` runs the bundle's
// one-shot import with it (stacks.SecretsBundle).
func (s *Stack) UpTarget(ctx context.Context, typ, name string) (*Result, error) {
	urn := resource.NewURN(tokens.QName(s.name), s.project.Name, "", tokens.Type(typ), name)
	return s.apply(ctx, apitype.UpdateUpdate, func(e *pkgengine.UpdateOptions) {
		e.Targets = deploy.NewUrnTargets([]string{string(urn)})
	})
}

// Refresh reads every resource back from its provider into state.
func (s *Stack) Refresh(ctx context.Context) (*Result, error) {
	return s.apply(ctx, apitype.RefreshUpdate, func(*pkgengine.UpdateOptions) {})
}

// Destroy deletes every resource of the stack it may. The engine refuses to
// delete protected ones (and says so in the error) and goes on with the rest.
func (s *Stack) Destroy(ctx context.Context) (*Result, error) {
	return s.apply(ctx, apitype.DestroyUpdate, func(e *pkgengine.UpdateOptions) { e.ContinueOnError = true })
}

// apply runs an operation that changes the stack: never a preview of its
// own (Milner's callers preview first), never a prompt.
func (s *Stack) apply(ctx context.Context, kind apitype.UpdateKind, set func(*pkgengine.UpdateOptions)) (*Result, error) {
	if err := checkBackupsOn(); err != nil {
		return nil, err
	}
	r, _, err := s.run(ctx, kind, set)
	return r, err
}

// run runs one engine operation of kind in this process: it serves the
// program to the engine, loads the stack's config and secrets, and folds
// the events the engine sends the backend's events channel into a Result.
// A failed operation's error carries the engine's own error diagnostics
// (e.g. the protect error). A ctx cancelled before it starts runs nothing;
// cancelled while it runs, the engine cancels gracefully (interrupt.go).
func (s *Stack) run(ctx context.Context, kind apitype.UpdateKind, set func(*pkgengine.UpdateOptions)) (*Result, *deploy.Plan, error) {
	name := string(kind)
	if kind == apitype.UpdateUpdate {
		name = "up"
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("stack %q: %s not started: %w", s.name, name, err)
	}
	ps, err := s.stackFile()
	if err != nil {
		return nil, nil, err
	}
	st, err := s.ensureStack(ctx, ps)
	if err != nil {
		return nil, nil, err
	}
	if err := s.pluginPath(); err != nil {
		return nil, nil, err
	}
	host, err := serveProgram(s.program)
	if err != nil {
		return nil, nil, fmt.Errorf("stack %q: language host: %w", s.name, err)
	}
	defer host.stop()
	project := *s.project
	project.Runtime = workspace.NewProjectRuntimeInfo("client", map[string]any{"address": host.address})

	sm := s.manager(ps.EncryptionSalt)
	cfg, err := ps.Config.Copy(sm.Decrypter(), sm.Encrypter())
	if err != nil {
		return nil, nil, fmt.Errorf("stack %q: config: %w", s.name, err)
	}
	if err := pkgworkspace.ValidateStackConfigAndApplyProjectConfig(ctx, s.name, &project, esc.Value{}, cfg, sm.Encrypter(), sm.Decrypter()); err != nil {
		return nil, nil, fmt.Errorf("stack %q: config: %w", s.name, err)
	}
	// The events come from the display's event log: backend.RefreshStack
	// and DestroyStack take no events channel (pkg/v3 v3.276.0
	// backend/stack.go; diy's Refresh and Destroy pass none), so one way
	// serves every operation.
	log, err := os.CreateTemp("", "milner-events-*.jsonl")
	if err != nil {
		return nil, nil, err
	}
	_ = log.Close()
	defer func() { _ = os.Remove(log.Name()) }()
	op := backend.UpdateOperation{
		Proj: &project, Root: s.dir,
		M: &backend.UpdateMetadata{Environment: map[string]string{}},
		Opts: backend.UpdateOptions{
			Engine: pkgengine.UpdateOptions{
				// The CLI's default --parallel (4 × GOMAXPROCS). Diffs run
				// concurrently: the bridged libvirt provider spends ≈ 15 ms
				// of CPU in each domain's Diff (BENCHMARKS.md); steps and
				// their order are unchanged (upstream TestParallelDiff).
				Parallel: 4 * int32(runtime.GOMAXPROCS(0)), ParallelDiff: true,
			},
			Display:     s.display.options(log.Name()),
			SkipPreview: kind != apitype.PreviewUpdate, AutoApprove: kind != apitype.PreviewUpdate,
		},
		StackConfiguration: backend.StackConfiguration{Config: cfg, Decrypter: sm.Decrypter()},
		SecretsManager:     sm,
		SecretsProvider:    lazyProvider{pass: s.pass},
		Scopes:             scopes{graceful: ctx, in: s.stop},
	}
	if kind == apitype.PreviewUpdate || kind == apitype.UpdateUpdate {
		// Milner's policy pack, loaded in process: the rules plain
		// `pulumi preview --policy-pack policy` runs (internal/policypack).
		op.Opts.Engine.LocalPolicyPacks = s.policyPacks()
		op.Opts.Engine.HostFactory = policyHostFactory(s.backend, filepath.Join(s.dir, PolicyDir))
	}
	s.display.showOn(&op.Opts.Display, s.progress)
	op.Opts.Engine.Debug = s.display.Debug
	set(&op.Opts.Engine)
	// The DIY backend prints its banner ("Previewing update (dev):") with
	// fmt.Printf, to os.Stdout whatever the display's Stdout (pkg/v3
	// v3.276.0 backend/diy/backend.go apply): while the operation runs,
	// os.Stdout is the progress file, so a verb whose stdout is its JSON
	// result (progress on stderr) keeps it JSON.
	if f, ok := s.progress.(*os.File); ok && f != os.Stdout {
		stdout := os.Stdout
		os.Stdout = f
		defer func() { os.Stdout = stdout }()
	}
	var plan *deploy.Plan
	var raw []pkgengine.Event // a preview's own events, for its Digest
	switch ectx := engineContext(ctx); kind {
	case apitype.PreviewUpdate:
		evs, collected := make(chan pkgengine.Event), make(chan struct{})
		go func() {
			defer close(collected)
			for e := range evs {
				raw = append(raw, e)
			}
		}()
		plan, _, err = backend.PreviewStack(ectx, st, op, evs)
		close(evs)
		<-collected
	case apitype.UpdateUpdate:
		_, err = backend.UpdateStack(ectx, st, op, nil)
	case apitype.RefreshUpdate:
		_, err = backend.RefreshStack(ectx, st, op)
	case apitype.DestroyUpdate:
		_, err = backend.DestroyStack(ectx, st, op)
	}
	if kerr := s.keepEvents(log.Name()); kerr != nil {
		return nil, nil, fmt.Errorf("stack %q: %s: %w", s.name, name, kerr)
	}
	r, rerr := readEvents(log.Name())
	if rerr != nil {
		return nil, nil, fmt.Errorf("stack %q: %s: %w", s.name, name, rerr)
	}
	r.raw = raw
	if err != nil {
		if len(r.Violations) > 0 {
			err = fmt.Errorf("%w: %w", ErrPolicyViolations, err)
		}
		if diags := r.errors(); len(diags) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.Join(diags, "; "))
		}
		if hint := pluginHints(err.Error(), s.tools); hint != "" {
			err = fmt.Errorf("%w (%s)", err, hint)
		}
		return r, plan, fmt.Errorf("stack %q: %s: %w", s.name, name, err)
	}
	return r, plan, nil
}

// readEvents folds the event log of an operation into a Result.
func readEvents(path string) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	evs, err := gate.ReadEvents(f)
	if err != nil {
		return nil, err
	}
	r := &Result{Events: evs, Steps: gate.StepsFromEvents(evs), Summary: map[string]int{}}
	for _, ev := range evs {
		if p := ev.PolicyEvent; p != nil && p.EnforcementLevel == string(apitype.Mandatory) && len(p.Exceptions) == 0 {
			r.Violations = append(r.Violations, Violation{Policy: p.PolicyName, URN: p.ResourceURN, Message: strings.TrimSpace(colors.Never.Colorize(p.Message))})
		}
		if ev.SummaryEvent != nil {
			for op, n := range ev.SummaryEvent.ResourceChanges {
				r.Summary[string(op)] = n
			}
		}
	}
	return r, nil
}

// errors are the engine's error diagnostics, which the CLI prints on stderr.
func (r *Result) errors() []string {
	var out []string
	for _, ev := range r.Events {
		if d := ev.DiagnosticEvent; d != nil && d.Severity == "error" {
			out = append(out, strings.TrimSpace(colors.Never.Colorize(d.Message)))
		}
	}
	return out
}

// pluginPath puts Tools first on PATH, where the engine finds the pinned
// pulumi-resource-<name> plugins, and forbids plugin downloads: plugins come
// only from the machine, as for the CLI's runs in Milner's scripts.
func (s *Stack) pluginPath() error {
	if path := os.Getenv("PATH"); !strings.HasPrefix(path, s.tools+string(os.PathListSeparator)) {
		if err := os.Setenv("PATH", s.tools+string(os.PathListSeparator)+path); err != nil {
			return err
		}
	}
	return os.Setenv("PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "true")
}

// ensureStack returns the stack in the backend, creating it on first use
// as `pulumi stack init` does: a passphrase salt in the stack file (added
// as one line, keeping the file's comments) and an empty stack.
func (s *Stack) ensureStack(ctx context.Context, ps *workspace.ProjectStack) (backend.Stack, error) {
	st, err := s.backend.GetStack(ctx, s.ref)
	if err != nil || st != nil {
		return st, err
	}
	if ps.EncryptionSalt == "" {
		salt, _, err := pkgpassphrase.NewPassphraseSecretsManager(s.pass)
		if err != nil {
			return nil, fmt.Errorf("stack %q: secrets: %w", s.name, err)
		}
		// Under Milner's lock (this Stack's, when its verb holds it), as
		// every write of a stack file (stackfile.Edit).
		if _, err := stackfile.Edit(ctx, s, s.file, stackfile.Salt(salt)); err != nil {
			if errors.Is(err, ErrLocked) {
				err = fmt.Errorf("write its passphrase salt: %w: another milner is changing this stack; run it again when that one has finished", err)
			}
			return nil, fmt.Errorf("stack %q: %w", s.name, err)
		}
		written, err := s.stackFile() // the salt kept: a milner that wrote one first wins
		if err != nil {
			return nil, err
		}
		ps.EncryptionSalt = written.EncryptionSalt
	}
	if st, err = s.backend.CreateStack(ctx, s.ref, s.dir, nil, nil); err != nil {
		return nil, fmt.Errorf("stack %q: create: %w", s.name, err)
	}
	return st, nil
}

// existing returns the stack, or nil when the backend has none of that name.
func (s *Stack) existing(ctx context.Context) (backend.Stack, error) {
	return s.backend.GetStack(ctx, s.ref)
}

// Resource is one resource as the stack's state records it.
type Resource struct {
	// URN is the resource's URN.
	URN resource.URN
	// Type is the resource's type token.
	Type string
	// ID is the provider's id (libvirt UUID or volume key); "" for components.
	ID string
	// Protect reports the protect flag.
	Protect bool
	// RetainOnDelete reports the retainOnDelete option: a delete only
	// removes the resource from state and leaves it live.
	RetainOnDelete bool
	// Inputs are the resource's inputs as state records them (secrets as
	// the engine's secret envelopes, never in the clear).
	Inputs map[string]any
	// Outputs are the resource's outputs as state records them (a
	// component's: what it registered; secrets as envelopes).
	Outputs map[string]any
}

// Name is the resource's logical name.
func (r Resource) Name() string { return r.URN.Name() }

// deployment reads the stack's latest checkpoint, secrets still encrypted:
// nothing is decrypted, so no key is derived. A stack the backend does not
// have yet has no resources.
func (s *Stack) deployment(ctx context.Context) (*apitype.DeploymentV3, error) {
	st, err := s.existing(ctx)
	if err != nil || st == nil {
		return &apitype.DeploymentV3{}, err
	}
	dep, err := backend.ExportStackDeployment(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("stack %q: export: %w", s.name, err)
	}
	return s.decode(dep)
}

// decode decodes an exported deployment.
func (s *Stack) decode(dep *apitype.UntypedDeployment) (*apitype.DeploymentV3, error) {
	var state apitype.DeploymentV3
	if len(dep.Deployment) > 0 {
		if err := json.Unmarshal(dep.Deployment, &state); err != nil {
			return nil, fmt.Errorf("stack %q: decode state: %w", s.name, err)
		}
	}
	return &state, nil
}

// Resources returns every resource in the stack's state, in state order.
func (s *Stack) Resources(ctx context.Context) ([]Resource, error) {
	state, err := s.deployment(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Resource, 0, len(state.Resources))
	for _, r := range state.Resources {
		out = append(out, Resource{URN: r.URN, Type: string(r.Type), ID: string(r.ID), Protect: r.Protect, RetainOnDelete: r.RetainOnDelete, Inputs: r.Inputs, Outputs: r.Outputs})
	}
	return out, nil
}

// snapshot reads the stack's latest checkpoint with its secrets (their key
// derived on first use); nil when the backend has no such stack or state.
func (s *Stack) snapshot(ctx context.Context) (*deploy.Snapshot, error) {
	st, err := s.existing(ctx)
	if err != nil || st == nil {
		return nil, err
	}
	snap, err := st.Snapshot(ctx, lazyProvider{pass: s.pass})
	if err != nil {
		return nil, fmt.Errorf("stack %q: read state: %w", s.name, err)
	}
	return snap, nil
}

// Outputs returns the stack's outputs from its latest checkpoint; secrets
// in the clear with reveal, as "[secret]" without.
func (s *Stack) Outputs(ctx context.Context, reveal bool) (map[string]any, error) {
	snap, err := s.snapshot(ctx)
	if err != nil || snap == nil {
		return map[string]any{}, err
	}
	for _, r := range snap.Resources {
		if r.Type == resource.RootStackType && r.Parent == "" {
			if reveal {
				return r.Outputs.MapRepl(nil, revealSecret), nil
			}
			return r.Outputs.MapRepl(nil, maskSecret), nil
		}
	}
	return map[string]any{}, nil
}

// OutputsInClear returns the logical name and the outputs of the one
// resource of type typ in the stack's latest checkpoint, secrets decrypted
// in memory only. It is what `milner secrets export` reads the cluster's
// secrets bundle with.
func (s *Stack) OutputsInClear(ctx context.Context, typ string) (string, map[string]any, error) {
	snap, err := s.snapshot(ctx)
	if err != nil {
		return "", nil, err
	}
	if snap != nil {
		for _, r := range snap.Resources {
			if string(r.Type) == typ && !r.Delete {
				return r.URN.Name(), r.Outputs.MapRepl(nil, revealSecret), nil
			}
		}
	}
	return "", nil, fmt.Errorf("stack %q: the state holds no %s", s.name, typ)
}

// revealSecret maps a secret to its plain value (for Outputs); maskSecret
// to "[secret]".
func revealSecret(v resource.PropertyValue) (any, bool) {
	if !v.IsSecret() {
		return nil, false
	}
	return v.SecretValue().Element.MapRepl(nil, revealSecret), true
}

func maskSecret(v resource.PropertyValue) (any, bool) { return "[secret]", v.IsSecret() }

// UnprotectAll clears the protect flag of every resource in state (`pulumi
// state unprotect --all`) and the lifecycle hooks its state names
// (components/lifecycle), in one state edit: the deliberate step before a
// destroy that is meant to delete disks too, such as a confirmed teardown.
// A destroy runs no program, so it could not run the hooks (pulumi pkg/v3
// v3.276.0 engine/destroy.go refuses a state that names delete hooks
// without --run-program); the next up binds them again.
func (s *Stack) UnprotectAll(ctx context.Context) error {
	return s.setProtect(ctx, nil, false)
}

// Unprotect clears the protect flag of the resources with the given URNs
// (none: nothing): the one replace of a protected OS volume that
// `milner up --replace <node> --os-disk` makes, protected again after it.
func (s *Stack) Unprotect(ctx context.Context, urns []resource.URN) error {
	if len(urns) == 0 {
		return nil
	}
	return s.setProtect(ctx, urns, false)
}

// Protect sets the protect flag of the resources with the given URNs (a
// failed teardown puts back what it unprotected).
func (s *Stack) Protect(ctx context.Context, urns []resource.URN) error {
	return s.setProtect(ctx, urns, true)
}

// Retain clears the protect flag of the resources with the given URNs and
// marks them retained on delete, in one state edit: a removed node's
// volumes (`milner up --remove <node>`), which its delete then drops from
// state and leaves on the host (pulumi pkg/v3 v3.276.0 resource/deploy/
// step.go DeleteStep.Apply: no provider Delete for a RetainOnDelete
// resource). Keep undoes it for what the run did not delete.
func (s *Stack) Retain(ctx context.Context, urns []resource.URN) error {
	return s.setFlags(ctx, urns, false, true)
}

// Keep puts back the protect flag, and clears retain-on-delete, of the
// resources with the given URNs still in state (Retain's undo).
func (s *Stack) Keep(ctx context.Context, urns []resource.URN) error {
	return s.setFlags(ctx, urns, true, false)
}

// setFlags sets the protect and retainOnDelete flags of urns (none:
// nothing) in one state edit.
func (s *Stack) setFlags(ctx context.Context, urns []resource.URN, protect, retain bool) error {
	if len(urns) == 0 {
		return nil
	}
	return s.editResources(ctx, protect, func(r *apitype.ResourceV3) {
		if slices.Contains(urns, r.URN) {
			r.Protect, r.RetainOnDelete = protect, retain
		}
	})
}

// setProtect sets the protect flag of urns (nil: every resource, and then
// an unprotect also drops the lifecycle hooks the state names).
func (s *Stack) setProtect(ctx context.Context, urns []resource.URN, protect bool) error {
	return s.editResources(ctx, protect, func(r *apitype.ResourceV3) {
		if urns == nil || slices.Contains(urns, r.URN) {
			r.Protect = protect
		}
		if urns == nil && !protect {
			r.ResourceHooks = nil
		}
	})
}

// editResources runs edit on each resource of the state and saves the
// checkpoint through the backend, as `pulumi state` does. An edit that
// lifts protection (protect false) is not started after an interrupt;
// once started, and one that protects always, runs to its end (an
// interrupt leaves no half-written state and never leaves holders
// unprotected).
func (s *Stack) editResources(ctx context.Context, protect bool, edit func(*apitype.ResourceV3)) error {
	if err := ctx.Err(); err != nil && !protect {
		return fmt.Errorf("stack %q: unprotect not started: %w", s.name, err)
	}
	ctx = engineContext(ctx)
	st, err := s.existing(ctx)
	if err != nil || st == nil {
		return err
	}
	return s.editState(ctx, st, func(dep *apitype.UntypedDeployment) error {
		state, err := s.decode(dep)
		if err != nil {
			return err
		}
		for i := range state.Resources {
			edit(&state.Resources[i])
		}
		dep.Deployment, err = json.Marshal(state)
		return err
	})
}

// editState is a state edit (protect flags, restore): export → edit →
// import, holding the DIY backend's own lock on the stack throughout, so
// that a plain `pulumi up`, which takes only that lock, cannot write
// between the edit's read and its write. The backend's ImportDeployment
// takes the same lock again (one lock object per backend instance: pkg/v3
// backend/diy lock.go lockPath, and checkForLock ignores its own) and
// deletes it when it ends, so the lock is released here only when the
// edit stops before its import.
func (s *Stack) editState(ctx context.Context, st backend.Stack, edit func(*apitype.UntypedDeployment) error) error {
	release := func() {}
	if l, ok := st.Backend().(interface {
		Lock(context.Context, backend.StackReference) error
		Unlock(context.Context, backend.StackReference)
	}); ok {
		if err := l.Lock(ctx, st.Ref()); err != nil {
			return fmt.Errorf("stack %q: take the backend's lock for a state edit: %w", s.name, err)
		}
		release = func() { l.Unlock(ctx, st.Ref()) }
	}
	dep, err := backend.ExportStackDeployment(ctx, st)
	if err != nil {
		release()
		return fmt.Errorf("stack %q: export: %w", s.name, err)
	}
	if err := edit(dep); err != nil {
		release()
		return err
	}
	beforeStateImport()
	if err := backend.ImportStackDeployment(ctx, st, dep); err != nil {
		return fmt.Errorf("stack %q: save state: %w", s.name, err)
	}
	return nil
}

// beforeStateImport runs between a state edit's export and its import;
// tests look at the backend's locks there.
var beforeStateImport = func() {}

// UpTargets runs an up with only urns targeted (`pulumi up --target`,
// without dependents): the engine steps nothing else but the providers and
// the stack resource, and a resource of the program with an import id is
// imported even when untargeted and then kept as read, with no update
// (pkg/v3 v3.276.0 step_generator.go: the import step comes before the
// targeting check, and continueStepsFromImport stubs Check and emits a
// same step for an untargeted resource). `milner adopt --all` imports the
// apps layer with it (internal/appsadopt).
func (s *Stack) UpTargets(ctx context.Context, urns []string) (*Result, error) {
	return s.apply(ctx, apitype.UpdateUpdate, func(e *pkgengine.UpdateOptions) {
		e.Targets = deploy.NewUrnTargets(urns)
	})
}

// EditState edits the stack's latest checkpoint through the backend, under
// its lock (editState), secrets still encrypted: edit sees and changes the
// decoded deployment.
func (s *Stack) EditState(ctx context.Context, edit func(*apitype.DeploymentV3) error) error {
	ctx = engineContext(ctx)
	st, err := s.existing(ctx)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("stack %q: no state to edit", s.name)
	}
	return s.editState(ctx, st, func(dep *apitype.UntypedDeployment) error {
		state, err := s.decode(dep)
		if err != nil {
			return err
		}
		if err := edit(state); err != nil {
			return err
		}
		dep.Deployment, err = json.Marshal(state)
		return err
	})
}
