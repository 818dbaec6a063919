package policypack

import (
	"context"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/policyx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/gate"
)

// TestEveryPolicyCanFail: each policy refuses a resource that breaks it
// and passes the same resource made right. (Every committed stack passes
// every policy: internal/conformance, `milner check`.)
func TestEveryPolicyCanFail(t *testing.T) {
	applyInputs := func(mode string, reset bool) resource.PropertyMap {
		return resource.PropertyMap{"applyMode": resource.NewProperty(mode),
			"onDestroy": resource.NewProperty(resource.PropertyMap{"reset": resource.NewProperty(reset)})}
	}
	repoChart := func(v string) resource.PropertyMap {
		return resource.PropertyMap{"chart": resource.NewProperty("web"), "version": resource.NewProperty(v),
			"repositoryOpts": resource.NewProperty(resource.PropertyMap{"repo": resource.NewProperty("https://charts.example.org")})}
	}
	applyOutputs := []string{"machineConfigurationInput", "machineConfiguration", "clientConfiguration"}
	for _, tc := range []struct {
		policy    string
		bad, good Resource
		want      string
	}{
		{"milner-protected", Resource{Type: gate.TypeLibvirtVolume, Name: "c-cp-1-data"}, Resource{Type: gate.TypeLibvirtVolume, Name: "c-cp-1-data", Protect: true}, "c-cp-1-data (libvirt:index/volume:Volume) is not protected"},
		{"milner-protected", Resource{Type: gate.TypeProxmoxVM, Name: "c-cp-1-disks"}, Resource{Type: gate.TypeProxmoxVM, Name: "c-cp-1"}, "c-cp-1-disks"},
		{"milner-secret-outputs", Resource{Type: gate.TypeKubeconfig, Name: "c-kubeconfig", SecretOutputs: []string{"kubeconfigRaw"}},
			Resource{Type: gate.TypeKubeconfig, Name: "c-kubeconfig", SecretOutputs: []string{"kubeconfigRaw", "kubernetesClientConfiguration", "clientConfiguration"}}, "does not mark output kubernetesClientConfiguration secret"},
		{"milner-secret-outputs", Resource{Type: TypeSecret, Name: "s", Inputs: resource.PropertyMap{"stringData": resource.NewProperty(resource.PropertyMap{"k": resource.NewProperty("v")})}},
			Resource{Type: TypeSecret, Name: "s", Inputs: resource.PropertyMap{"stringData": resource.MakeSecret(resource.NewProperty(resource.PropertyMap{"k": resource.NewProperty("v")}))}}, "s: the Secret's stringData is not a secret value"},
		{"milner-pinned-charts", Resource{Type: gate.TypeHelmRelease, Name: "web-release", Inputs: repoChart("^1.2")}, Resource{Type: gate.TypeHelmRelease, Name: "web-release", Inputs: repoChart("1.2.3")}, `chart version "^1.2" is not pinned`},
		// A local chart (chart.path: no repository, no version) is pinned by the repository that holds it.
		{"milner-pinned-charts", Resource{Type: gate.TypeHelmRelease, Name: "web-release", Inputs: resource.PropertyMap{"chart": resource.NewProperty("web"), "repositoryOpts": resource.NewProperty(resource.PropertyMap{})}},
			Resource{Type: gate.TypeHelmRelease, Name: "web-release", Inputs: resource.PropertyMap{"chart": resource.NewProperty("charts/web")}}, `chart version "" is not pinned`},
		{"milner-apply-mode", Resource{Type: gate.TypeConfigApply, Name: "cp-1-apply", SecretOutputs: applyOutputs, Inputs: applyInputs("reboot", false)}, Resource{Type: gate.TypeConfigApply, Name: "cp-1-apply", SecretOutputs: applyOutputs, Inputs: applyInputs("no_reboot", false)}, `cp-1-apply applies with mode "reboot"`},
		{"milner-no-reset", Resource{Type: gate.TypeConfigApply, Name: "cp-1-apply", SecretOutputs: applyOutputs, Inputs: applyInputs("staged", true)}, Resource{Type: gate.TypeConfigApply, Name: "cp-1-apply", SecretOutputs: applyOutputs, Inputs: applyInputs("staged", false)}, "cp-1-apply: onDestroy.reset is not set to false"},
	} {
		t.Run(tc.policy+"/"+tc.want, func(t *testing.T) {
			for _, p := range Policies {
				bad, good := strings.Join(p.Check(tc.bad), "\n"), p.Check(tc.good)
				if p.Name != tc.policy {
					assert.Empty(t, bad, "%s also refuses it", p.Name)
					continue
				}
				assert.Contains(t, bad, tc.want)
				assert.Empty(t, good)
			}
		})
	}
}

// TestPackReportsEachViolation: the policyx pack reports every violation
// of a resource, each with its URN, mandatory.
func TestPackReportsEachViolation(t *testing.T) {
	pack, err := Pack()
	require.NoError(t, err)
	assert.Equal(t, Name, pack.Name())
	var got []string
	m := manager(func(msg, urn string) { got = append(got, urn+" "+msg) })
	res := policyx.AnalyzerResource{Type: gate.TypeTalosSecrets, Name: "stray", URN: "urn:x"}
	for _, p := range pack.Policies() {
		assert.Equal(t, policyx.EnforcementLevelMandatory, p.EnforcementLevel(), p.Name())
		require.NoError(t, p.(policyx.ResourceValidationPolicy).Validate(context.Background(), policyx.ResourceValidationArgs{Manager: m, Resource: res}))
	}
	assert.Equal(t, []string{
		"urn:x stray (talos:machine/secrets:Secrets) is not protected: the engine would replace or delete it",
		"urn:x stray (talos:machine/secrets:Secrets) does not mark output machineSecrets secret",
		"urn:x stray (talos:machine/secrets:Secrets) does not mark output clientConfiguration secret",
	}, got)
}

type manager func(msg, urn string)

func (m manager) ReportViolation(msg, urn string) { m(msg, urn) }
