// Package lifecycle holds the resource hooks that make a plain `pulumi
// preview` and `pulumi up` refuse what Milner refuses where no live
// evidence is needed: the delete of a Helm release, the replace or delete
// of the cluster's secrets bundle or of persistent substrate, the replace
// of the cluster's bootstrap.
//
// A hook is bound to a resource by name, and the engine records the names
// in the resource's state; a delete (also the delete half of a replace)
// runs the before-delete hooks its old state names, looked up among the
// hooks the program registered in that run (pulumi pkg/v3 v3.276.0
// resource/deploy/step.go DeleteStep.Apply, deployment.go RunHooks: "hook
// %q was not registered" otherwise). So every run registers every hook
// (Register), whatever it declares, and the names below are a state
// contract: renaming one breaks every stack that recorded it.
//
// Registered with OnDryRun, a hook runs in previews too (RunHooks skips a
// hook without it when DryRun), so a plain `pulumi preview` of the delete
// fails, and a plain `pulumi up`, which previews first, stops there,
// before any step. `pulumi up --skip-preview` has no preview: there the
// delete of a release or a bootstrap replaced create-before-delete is
// refused only after its replacement was created (the engine's order), so
// the hooks are a guard for the preview, not for --skip-preview.
// A before-delete hook cannot tell a delete from the delete of a
// replace (its arguments are the old inputs and outputs alone: sdk/v3
// v3.276.0 go/pulumi resource.go ResourceHookArgs), so the bootstrap's
// hook refuses only when the run declares the bootstrap again: then the
// delete can only be a replace's.
//
// Protect already stops the engine from replacing or deleting persistent
// substrate and the secrets bundle; their hooks name Milner's rule and
// still hold where the protection was lifted by hand (`pulumi state
// unprotect`). `pulumi destroy` refuses a stack whose state names delete
// hooks unless the program runs (pkg/v3 engine/destroy.go
// newDestroySource: "You must run with the `--run-program` flag"), and
// with --run-program the hooks refuse it: a full teardown is
// `milner teardown`, which lifts the protection and the hooks together.
package lifecycle

import (
	"fmt"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// The hooks' names: a state contract (see the package doc). Each is also
// the rule a refusal names.
const (
	// KeepRelease refuses the delete of a Helm release (not retained on
	// delete), and so its replace.
	KeepRelease = "milner-keep-release"
	// KeepSecrets refuses the delete or replace of the cluster's secrets
	// bundle: running nodes trust only its CAs.
	KeepSecrets = "milner-keep-secrets-bundle"
	// KeepPersistent refuses the delete or replace of persistent substrate:
	// a pool, network, volume, boot media or Proxmox disk holder.
	KeepPersistent = "milner-keep-persistent"
	// KeepBootstrap refuses the replace of the cluster's bootstrap: Talos
	// refuses a second bootstrap of etcd.
	KeepBootstrap = "milner-keep-bootstrap"
)

// Names are every hook's name, in the order Register registers them.
var Names = []string{KeepRelease, KeepSecrets, KeepPersistent, KeepBootstrap}

// Options are what one run of the program tells its hooks.
type Options struct {
	// Gated is milner's run: its own gate judges every preview, the whole
	// delta at once with every refusal named, so the hooks run only in its
	// update (not OnDryRun), where they hold if the gate and the hooks
	// ever disagree. False (plain `pulumi`): the hooks run in previews too.
	Gated bool
	// Allowed are URNs whose replace this run may take: milner sets the
	// targets of its gated plan (`up --replace <node> --os-disk` replaces
	// that node's protected OS volume and nothing else).
	Allowed []string
	// DeclaresBootstrap is whether the run declares the cluster's
	// bootstrap: a delete of it is then the delete of a replace.
	DeclaresBootstrap bool
}

// Hooks are the hooks of one run of the program.
type Hooks struct {
	release, secrets, persistent, bootstrap *pulumi.ResourceHook
}

// Register registers every hook once for the run of ctx (a second
// registration of a name fails in the engine) and returns them.
func Register(ctx *pulumi.Context, o Options) (*Hooks, error) {
	opts := &pulumi.ResourceHookOptions{OnDryRun: !o.Gated}
	h := &Hooks{}
	for _, r := range []struct {
		hook *(*pulumi.ResourceHook)
		name string
		fn   pulumi.ResourceHookFunction
	}{
		{&h.release, KeepRelease, o.refuse(KeepRelease, releaseRefusal)},
		{&h.secrets, KeepSecrets, o.refuse(KeepSecrets, secretsRefusal)},
		{&h.persistent, KeepPersistent, o.refuse(KeepPersistent, persistentRefusal)},
		{&h.bootstrap, KeepBootstrap, o.bootstrap()},
	} {
		hook, err := ctx.RegisterResourceHook(r.name, r.fn, opts)
		if err != nil {
			return nil, fmt.Errorf("lifecycle: hook %s: %w", r.name, err)
		}
		*r.hook = hook
	}
	return h, nil
}

// Refusal is a hook's refusal: the rule (the hook's name), what it refused
// and what to do instead. The engine prints it as `before hook "<rule>"
// failed: <Error()>`.
type Refusal struct {
	Rule, Resource, Reason, Instead string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("refused by Milner's rule %s: %s: %s; %s", r.Rule, r.Resource, r.Reason, r.Instead)
}

// refuse is the callback of a hook that refuses every delete and replace
// but of an Allowed URN.
func (o Options) refuse(rule string, why func(args *pulumi.ResourceHookArgs) (string, string)) pulumi.ResourceHookFunction {
	return func(args *pulumi.ResourceHookArgs) error {
		if slices.Contains(o.Allowed, string(args.URN)) {
			return nil
		}
		reason, instead := why(args)
		return &Refusal{Rule: rule, Resource: args.Name, Reason: reason, Instead: instead}
	}
}

// bootstrap is KeepBootstrap's callback: a delete of the bootstrap is a
// replace when the run declares it again.
func (o Options) bootstrap() pulumi.ResourceHookFunction {
	refuse := o.refuse(KeepBootstrap, func(*pulumi.ResourceHookArgs) (string, string) {
		return "the cluster's bootstrap would be replaced, bootstrapping etcd a second time, which Talos refuses",
			"revert the change that forces it; after a state loss record the bootstrap with `milner adopt --bootstrap`"
	})
	return func(args *pulumi.ResourceHookArgs) error {
		if !o.DeclaresBootstrap {
			return nil // a delete: the program no longer declares it (milner:cluster.adoptBootstrap)
		}
		return refuse(args)
	}
}

func releaseRefusal(*pulumi.ResourceHookArgs) (string, string) {
	return "the Helm release would be deleted (or replaced) with its workloads",
		"keep the app in milner:apps (rename it with previousNames), or set its retainOnDelete and run an up before removing it"
}

func secretsRefusal(*pulumi.ResourceHookArgs) (string, string) {
	return "the cluster's secrets bundle would be deleted or replaced; the nodes trust only its CAs",
		"revert the change; to remove the whole cluster use `milner teardown`"
}

func persistentRefusal(args *pulumi.ResourceHookArgs) (string, string) {
	return fmt.Sprintf("%s is persistent substrate and would be deleted or replaced, with its data", args.Type),
		"revert the change (a node's VM alone is replaced: `milner up --replace <node>`); to remove the whole cluster use `milner teardown`"
}

// bind is the option binding the hook pick chooses before delete; none
// without hooks (a component built outside a program run, as in tests).
func (h *Hooks) bind(pick func(*Hooks) *pulumi.ResourceHook) pulumi.ResourceOption {
	if h == nil {
		return pulumi.ResourceHooks(nil)
	}
	return pulumi.ResourceHooks(&pulumi.ResourceHookBinding{BeforeDelete: []*pulumi.ResourceHook{pick(h)}})
}

// Release binds KeepRelease: to a release that is not retained on delete
// (a retained release's delete only leaves state).
func (h *Hooks) Release() pulumi.ResourceOption {
	return h.bind(func(h *Hooks) *pulumi.ResourceHook { return h.release })
}

// Secrets binds KeepSecrets to the cluster's secrets bundle.
func (h *Hooks) Secrets() pulumi.ResourceOption {
	return h.bind(func(h *Hooks) *pulumi.ResourceHook { return h.secrets })
}

// Persistent binds KeepPersistent to a persistent substrate resource.
func (h *Hooks) Persistent() pulumi.ResourceOption {
	return h.bind(func(h *Hooks) *pulumi.ResourceHook { return h.persistent })
}

// Bootstrap binds KeepBootstrap to the cluster's bootstrap.
func (h *Hooks) Bootstrap() pulumi.ResourceOption {
	return h.bind(func(h *Hooks) *pulumi.ResourceHook { return h.bootstrap })
}
