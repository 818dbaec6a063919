package engine

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	pkgengine "github.com/pulumi/pulumi/pkg/v3/engine"
	"github.com/pulumi/pulumi/pkg/v3/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/policyx"

	"github.com/milner/milner/internal/policypack"
)

// PolicyDir is the project's policy pack directory, what plain
// `pulumi preview --policy-pack policy` names.
const PolicyDir = "policy"

// policyPacks are the local policy packs every operation of the stack
// runs: Milner's (internal/policypack), at the project's policy/, as
// `--policy-pack policy` names it. The engine loads a local pack through
// its plugin host (pkg/v3 v3.276.0 engine/update.go
// LoadLocalPolicyPackAnalyzers, loadPolicyAnalyzer); policyHost answers
// for this one in process, so milner needs neither Go nor a language host.
func (s *Stack) policyPacks() []pkgengine.LocalPolicyPack {
	return []pkgengine.LocalPolicyPack{{Path: filepath.Join(s.dir, PolicyDir)}}
}

// policyHostFactory is the DIY backend's own host factory (pkg/v3
// backend/diy backend.go: DefaultHostFactory when none is given) whose
// hosts answer the policy pack at dir in process.
func policyHostFactory(b backend.Backend, dir string) pkgengine.HostFactory {
	def := backend.DefaultHostFactory(b.GetReadOnlyCloudRegistry())
	return func(ctx context.Context, d, statusD diag.Sink, debug plugin.DebugContext) (plugin.Host, error) {
		h, err := def(ctx, d, statusD, debug)
		if err != nil {
			return nil, err
		}
		return &policyHost{Host: h, dir: dir}, nil
	}
}

// policyHost is a plugin host that loads Milner's pack in process.
type policyHost struct {
	plugin.Host
	dir string
}

func (h *policyHost) PolicyAnalyzer(ctx *plugin.Context, name tokens.QName, path string, opts *plugin.PolicyAnalyzerOptions) (plugin.Analyzer, error) {
	abs, err := filepath.Abs(path)
	if err != nil || abs != h.dir {
		return h.Host.PolicyAnalyzer(ctx, name, path, opts)
	}
	pack, err := policypack.Pack()
	if err != nil {
		return nil, err
	}
	return &packAnalyzer{name: name, pack: pack}, nil
}

// packAnalyzer runs a policyx pack's resource validations in process, as
// policyx's own analyzer server does for the plugin (sdk/v3 v3.276.0
// go/pulumi/policyx server.go Analyze: each ResourceValidationPolicy, its
// violations reported at the policy's enforcement level, the message
// its description and the violation on the next line).
type packAnalyzer struct {
	name tokens.QName
	pack policyx.PolicyPack
}

var _ plugin.Analyzer = (*packAnalyzer)(nil)

func (a *packAnalyzer) Close() error                 { return nil }
func (a *packAnalyzer) Name() tokens.QName           { return a.name }
func (a *packAnalyzer) Cancel(context.Context) error { return nil }

func (a *packAnalyzer) Configure(context.Context, map[string]plugin.AnalyzerPolicyConfig) error {
	return nil
}

func (a *packAnalyzer) GetPluginInfo(context.Context) (plugin.PluginInfo, error) {
	v := a.pack.Version()
	return plugin.PluginInfo{Version: &v}, nil
}

func (a *packAnalyzer) GetAnalyzerInfo(context.Context) (plugin.AnalyzerInfo, error) {
	info := plugin.AnalyzerInfo{Name: a.pack.Name(), Version: a.pack.Version().String(), SupportsConfig: false}
	for _, p := range a.pack.Policies() {
		info.Policies = append(info.Policies, plugin.AnalyzerPolicyInfo{
			Name: p.Name(), Description: p.Description(), EnforcementLevel: level(p.EnforcementLevel()),
		})
	}
	return info, nil
}

func (a *packAnalyzer) Analyze(ctx context.Context, r plugin.AnalyzerResource) (plugin.AnalyzeResponse, error) {
	var out plugin.AnalyzeResponse
	res := policyx.AnalyzerResource{
		Type: string(r.Type), Properties: r.Properties, URN: string(r.URN), Name: r.Name,
		Options: pulumi.ResourceOptions{
			Protect: r.Options.Protect, IgnoreChanges: r.Options.IgnoreChanges,
			DeleteBeforeReplace:     r.Options.DeleteBeforeReplace != nil && *r.Options.DeleteBeforeReplace,
			AdditionalSecretOutputs: keys(r.Options.AdditionalSecretOutputs),
		},
		Parent: string(r.Options.Parent),
	}
	for _, p := range a.pack.Policies() {
		rv, ok := p.(policyx.ResourceValidationPolicy)
		if !ok || p.EnforcementLevel() == policyx.EnforcementLevelDisabled {
			continue
		}
		m := &violations{}
		if err := rv.Validate(ctx, policyx.ResourceValidationArgs{Manager: m, Resource: res}); err != nil {
			return out, fmt.Errorf("failed to validate resource %q with policy %q: %w", r.URN, p.Name(), err)
		}
		for _, v := range m.list {
			urn := resource.URN(v.urn)
			if urn == "" {
				urn = r.URN
			}
			out.Diagnostics = append(out.Diagnostics, plugin.AnalyzeDiagnostic{
				PolicyName: p.Name(), PolicyPackName: a.pack.Name(), PolicyPackVersion: a.pack.Version().String(),
				Description: p.Description(), Message: p.Description() + "\n" + v.message,
				EnforcementLevel: level(p.EnforcementLevel()), URN: urn,
			})
		}
	}
	return out, nil
}

func (a *packAnalyzer) AnalyzeStack(context.Context, []plugin.AnalyzerStackResource) (plugin.AnalyzeResponse, error) {
	return plugin.AnalyzeResponse{}, nil // the pack has no stack policy
}

func (a *packAnalyzer) Remediate(context.Context, plugin.AnalyzerResource) (plugin.RemediateResponse, error) {
	return plugin.RemediateResponse{}, nil // nor a remediation
}

// violations is a policyx.PolicyManager that keeps what a policy reports.
type violations struct {
	list []struct{ message, urn string }
}

func (v *violations) ReportViolation(message, urn string) {
	v.list = append(v.list, struct{ message, urn string }{message, urn})
}

// level is the engine's name of a policyx enforcement level.
func level(l policyx.EnforcementLevel) apitype.EnforcementLevel {
	switch l {
	case policyx.EnforcementLevelAdvisory:
		return apitype.Advisory
	case policyx.EnforcementLevelDisabled:
		return apitype.Disabled
	case policyx.EnforcementLevelRemediate:
		return apitype.Remediate
	default:
		return apitype.Mandatory
	}
}

func keys(ks []resource.PropertyKey) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}
