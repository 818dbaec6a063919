// Package policypack is Milner's policy pack (Pulumi's policyx, sdk/v3
// v3.276.0 go/pulumi/policyx, experimental): the rules a policy can judge
// from one resource's inputs and options, no step and no live evidence.
// One source for both ways of running the program:
//
//   - plain `pulumi preview|up --policy-pack policy`: policy/ is the pack
//     (PulumiPolicy.yaml, runtime go; its main serves Pack with
//     policyx.Main);
//   - milner: its in-process engine loads the same pack for every preview
//     and update (internal/engine's analyzer), and reports each violation
//     as a refusal naming the policy.
//
// A policy sees a resource's type, name, inputs and options (protect,
// ignoreChanges, deleteBeforeReplace, additionalSecretOutputs), not the
// step the engine plans for it (pkg/v3 resource/deploy step_generator.go
// analyze: Analyze runs on the goal, before the diff), nor retainOnDelete
// (policyx convertAnalyzerResourceOptions drops it), nor resource hooks.
// So a delete or replace is the lifecycle hooks' (components/lifecycle),
// and what needs live evidence, or the whole plan, stays milner's
// (docs/design.md).
package policypack

import (
	"context"
	"fmt"
	"slices"
	"strings"

	blang "github.com/blang/semver"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/policyx"
	"golang.org/x/mod/semver"

	"github.com/milner/milner/components/talosnode"
	"github.com/milner/milner/internal/applymode"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/stacks"
)

// Name is the pack's name (PulumiPolicy.yaml's, policyx.NewPolicyPack's).
const Name = "milner"

// Version is the pack's version. Pulumi's policy API types it as
// github.com/blang/semver's Version (policyx, plugin.AnalyzerInfo), so
// that library appears where Pulumi's types need it and nowhere else;
// Milner's own version logic is golang.org/x/mod/semver.
var Version = blang.MustParse("1.0.0")

// Resource is what a policy judges of one resource: its type, logical
// name, inputs and the options a policy sees.
type Resource struct {
	Type, Name string
	// Inputs are the resource's inputs (secrets as secret values).
	Inputs resource.PropertyMap
	// Protect is the protect option.
	Protect bool
	// SecretOutputs are the additionalSecretOutputs option.
	SecretOutputs []string
}

// Policy is one rule: its name (what a violation names), what holds when
// it passes, and its check, which returns every violation of r ("" none).
type Policy struct {
	Name, Description string
	Check             func(r Resource) []string
}

// Policies are the pack's rules, every one mandatory.
var Policies = []Policy{
	{"milner-protected", "persistent substrate and the cluster's secrets bundle are protected", protected},
	{"milner-secret-outputs", "every Talos output carrying a key, and every Secret's data, is stored as a secret", secretOutputs},
	{"milner-pinned-charts", "every chart of a repository is pinned to an exact version", pinnedChart},
	{"milner-apply-mode", "Talos config is applied staged_if_needing_reboot, or in the mode milner decided for the node (staged, no_reboot, auto for a node in maintenance mode), never rebooting a running node", applyMode},
	{"milner-no-reset", "destroying a Talos config apply never resets the node", noReset},
}

// retainedMedia are the persistent types retained on delete instead of
// protected (a boot image per Talos version; components/substrate).
var retainedMedia = []string{gate.TypeProxmoxImage, gate.TypeProxmoxFile}

func protected(r Resource) []string {
	persistent := gate.LayerOf(r.Type, r.Name) == gate.Persistent && !slices.Contains(retainedMedia, r.Type)
	if (persistent || r.Type == gate.TypeTalosSecrets) && !r.Protect {
		return []string{fmt.Sprintf("%s (%s) is not protected: the engine would replace or delete it", r.Name, r.Type)}
	}
	return nil
}

// secretOutputsOf are the outputs each Talos type must mark secret.
var secretOutputsOf = map[string][]string{
	gate.TypeTalosSecrets:   stacks.SecretOutputs,
	gate.TypeConfigApply:    talosnode.ApplySecretOutputs,
	gate.TypeTalosBootstrap: stacks.BootstrapSecretOutputs,
	gate.TypeKubeconfig:     stacks.KubeconfigSecretOutputs,
}

// TypeSecret is a Kubernetes Secret's type token.
const TypeSecret = "kubernetes:core/v1:Secret"

func secretOutputs(r Resource) []string {
	var out []string
	for _, o := range secretOutputsOf[r.Type] {
		if !slices.Contains(r.SecretOutputs, o) {
			out = append(out, fmt.Sprintf("%s (%s) does not mark output %s secret", r.Name, r.Type, o))
		}
	}
	if r.Type == TypeSecret {
		for _, k := range []resource.PropertyKey{"data", "stringData"} {
			if v, ok := r.Inputs[k]; ok && !v.IsNull() && !v.ContainsSecrets() && !v.ContainsUnknowns() {
				out = append(out, fmt.Sprintf("%s: the Secret's %s is not a secret value", r.Name, k))
			}
		}
	}
	return out
}

// PinnedChart is milner-pinned-charts' check, also `milner check`'s.
func PinnedChart(r Resource) []string { return pinnedChart(r) }

func pinnedChart(r Resource) []string {
	if r.Type != gate.TypeHelmRelease {
		return nil
	}
	chart := str(r.Inputs["chart"])
	if !r.Inputs.HasValue("version") && !r.Inputs.HasValue("repositoryOpts") && !strings.HasPrefix(chart, "oci://") {
		return nil // a local chart (chart.path): the repository's commit pins it
	}
	v := str(r.Inputs["version"])
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	if !semver.IsValid(v) || semver.Canonical(v) != v {
		return []string{fmt.Sprintf("%s: chart version %q is not pinned to an exact version", r.Name, strings.TrimPrefix(v, "v"))}
	}
	return nil
}

// applyModes are the modes a config apply may send: the program's own
// (plain `pulumi`) and those milner decides per node (internal/applymode).
var applyModes = []string{talosnode.ApplyMode, applymode.Staged, applymode.NoReboot, applymode.Auto}

func applyMode(r Resource) []string {
	if r.Type != gate.TypeConfigApply {
		return nil
	}
	v := r.Inputs["applyMode"]
	if v.IsComputed() || v.IsOutput() && !v.OutputValue().Known {
		return nil // decided later in the run: judged in the update
	}
	if mode := str(v); !slices.Contains(applyModes, mode) {
		return []string{fmt.Sprintf("%s applies with mode %q, want one of %s", r.Name, mode, strings.Join(applyModes, ", "))}
	}
	return nil
}

// NoReset is milner-no-reset's check, also `milner check`'s.
func NoReset(r Resource) []string { return noReset(r) }

func noReset(r Resource) []string {
	if r.Type != gate.TypeConfigApply {
		return nil
	}
	p, _ := resource.ParsePropertyPath("onDestroy.reset")
	v, ok := p.Get(resource.NewObjectProperty(r.Inputs))
	if v = plain(v); !ok || !v.IsBool() || v.BoolValue() {
		return []string{fmt.Sprintf("%s: onDestroy.reset is not set to false (the provider's default resets the node)", r.Name)}
	}
	return nil
}

// plain unwraps secret and known output values.
func plain(v resource.PropertyValue) resource.PropertyValue {
	for {
		switch {
		case v.IsSecret():
			v = v.SecretValue().Element
		case v.IsOutput() && v.OutputValue().Known:
			v = v.OutputValue().Element
		default:
			return v
		}
	}
}

// str is a string value, "" for anything else.
func str(v resource.PropertyValue) string {
	if v = plain(v); v.IsString() {
		return v.StringValue()
	}
	return ""
}

// FromAnalyzer is the Resource a policyx resource validation sees.
func FromAnalyzer(r policyx.AnalyzerResource) Resource {
	return Resource{Type: r.Type, Name: r.Name, Inputs: resource.ToResourcePropertyMap(r.Properties),
		Protect: r.Options.Protect, SecretOutputs: r.Options.AdditionalSecretOutputs}
}

// Pack is the policy pack: each Policy a mandatory policyx resource
// validation reporting each violation with the resource's URN.
func Pack() (policyx.PolicyPack, error) {
	var ps []policyx.Policy
	for _, p := range Policies {
		check := p.Check
		ps = append(ps, policyx.NewResourceValidationPolicy(p.Name, policyx.ResourceValidationPolicyArgs{
			Description:      p.Description,
			EnforcementLevel: policyx.EnforcementLevelMandatory,
			ValidateResource: func(_ context.Context, args policyx.ResourceValidationArgs) error {
				for _, v := range check(FromAnalyzer(args.Resource)) {
					args.Manager.ReportViolation(v, args.Resource.URN)
				}
				return nil
			},
		}))
	}
	return policyx.NewPolicyPack(Name, Version, policyx.EnforcementLevelMandatory, ps)
}
