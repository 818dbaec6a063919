package tests

// Adoption of the cluster bootstrap on Pulumi's own engine (the step
// generator and executor of pulumi/pkg v3.276.0, through its lifecycle test
// framework), with a provider that behaves as terraform-provider-talos
// v0.10.1's talos_machine_bootstrap does (the provider pulumi-talos v0.7.1
// wraps; pkg/talos/talos_machine_bootstrap_resource.go at tag v0.10.1):
//
//   - Schema: node and client_configuration required, endpoint optional; no
//     attribute requires a replace (so any diff is an update).
//   - Create calls the Bootstrap API; a running cluster answers
//     AlreadyExists "etcd data directory is not empty" (machined
//     v1alpha1_server.go Bootstrap), which the provider retries until its
//     timeout (only InvalidArgument stops it) and then fails.
//   - Read does nothing; Update stores the plan; Delete does nothing.
//
// The bootstrap's options are taken from the real program's registration
// (the recording mock), so the test fails if the program's options change.
// An adopted cluster declares no bootstrap (stacks/talos.go says why: the
// real plugin cannot import one), so nothing here imports.

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/blang/semver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pulumi/pulumi/pkg/v3/display"
	"github.com/pulumi/pulumi/pkg/v3/engine"
	lt "github.com/pulumi/pulumi/pkg/v3/engine/lifecycletest/framework"
	"github.com/pulumi/pulumi/pkg/v3/resource/deploy"
	"github.com/pulumi/pulumi/pkg/v3/resource/deploy/deploytest"
	"github.com/pulumi/pulumi/pkg/v3/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/property"

	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/tests/offlinetest"
)

// talosBootstrapProvider imitates terraform-provider-talos v0.10.1's
// bootstrap resource as the engine sees it through the bridge.
type talosBootstrapProvider struct {
	creates int // Bootstrap API calls
}

func (p *talosBootstrapProvider) provider() *deploytest.Provider {
	return &deploytest.Provider{
		CheckF: func(_ context.Context, req plugin.CheckRequest) (plugin.CheckResponse, error) {
			// Required attributes (the framework's config validation).
			var failures []plugin.CheckFailure
			for _, k := range []string{"node", "clientConfiguration"} {
				if v, ok := req.NewInputs.GetOk(k); !ok || v.IsNull() {
					failures = append(failures, plugin.CheckFailure{Property: resource.PropertyKey(k), Reason: "Missing required argument"})
				}
			}
			return plugin.CheckResponse{Properties: req.NewInputs, Failures: failures}, nil
		},
		DiffF: func(_ context.Context, req plugin.DiffRequest) (plugin.DiffResult, error) {
			detailed := map[string]plugin.PropertyDiff{}
			for _, k := range []string{"node", "endpoint", "clientConfiguration"} {
				if !req.OldOutputs.Get(k).Equals(req.NewInputs.Get(k)) {
					detailed[k] = plugin.PropertyDiff{Kind: plugin.DiffUpdate}
				}
			}
			if len(detailed) == 0 {
				return plugin.DiffResult{Changes: plugin.DiffNone}, nil
			}
			return plugin.DiffResult{Changes: plugin.DiffSome, DetailedDiff: detailed}, nil
		},
		CreateF: func(_ context.Context, req plugin.CreateRequest) (plugin.CreateResponse, error) {
			if req.Preview {
				return plugin.CreateResponse{Properties: req.Properties, Status: resource.StatusOK}, nil
			}
			p.creates++
			return plugin.CreateResponse{}, errors.New(`rpc error: code = AlreadyExists desc = etcd data directory is not empty`)
		},
		UpdateF: func(_ context.Context, req plugin.UpdateRequest) (plugin.UpdateResponse, error) {
			return plugin.UpdateResponse{Properties: req.NewInputs, Status: resource.StatusOK}, nil
		},
	}
}

// bootstrapInputs are a bootstrap's inputs once the first control plane's
// apply is known.
func bootstrapInputs(node string) property.Map {
	return property.NewMap(map[string]property.Value{
		"node":     property.New(node),
		"endpoint": property.New(node),
		"clientConfiguration": property.New(property.NewMap(map[string]property.Value{
			"caCertificate": property.New("ca"), "clientCertificate": property.New("crt"), "clientKey": property.New("key"),
		})),
	})
}

// bootstrapRun is one engine operation on a state holding at most the
// bootstrap, registered with opts.
type bootstrapRun struct {
	t    *testing.T
	prov *talosBootstrapProvider
	plan *lt.TestPlan
	node string
	reg  deploytest.ResourceOptions
}

func newBootstrapRun(t *testing.T, ignore []string) *bootstrapRun {
	r := &bootstrapRun{t: t, prov: &talosBootstrapProvider{}, node: "10.73.0.11",
		reg: deploytest.ResourceOptions{IgnoreChanges: ignore}}
	loaders := []*deploytest.ProviderLoader{
		deploytest.NewProviderLoader("talos", semver.MustParse("0.7.1"), func() (plugin.Provider, error) {
			return r.prov.provider(), nil
		}),
	}
	programF := deploytest.NewLanguageRuntimeF(func(_ plugin.RunInfo, monitor *deploytest.ResourceMonitor) error {
		o := r.reg
		o.Inputs = bootstrapInputs(r.node)
		_, err := monitor.RegisterResource(tBootstrap, "milner-dev-bootstrap", true, o)
		return err
	})
	r.plan = &lt.TestPlan{Options: lt.TestUpdateOptions{T: t, SkipDisplayTests: true, HostF: deploytest.NewPluginHostF(nil, nil, programF, nil, nil, loaders...)}}
	return r
}

// op runs an update (or its preview) and returns the new snapshot, the
// bootstrap's step ops and the error.
func (r *bootstrapRun) op(snap *deploy.Snapshot, dryRun bool) (*deploy.Snapshot, []display.StepOp, error) {
	var ops []display.StepOp
	validate := func(_ workspace.Project, _ deploy.Target, _ engine.JournalEntries, events []engine.Event, err error) error {
		for _, e := range events {
			if p, ok := e.Payload().(engine.ResourcePreEventPayload); ok && p.Metadata.URN.Name() == "milner-dev-bootstrap" {
				ops = append(ops, p.Metadata.Op)
			}
		}
		return err
	}
	out, err := lt.TestOp(engine.Update).Run(r.plan.GetProject(), r.plan.GetTarget(r.t, snap), r.plan.Options, dryRun, r.plan.BackendClient, validate)
	return out, ops, err
}

// adoptedDev is the dev stack's config with the record `milner adopt`
// writes (into a copy of Pulumi.dev.yaml) when etcd lists members.
func adoptedDev(t *testing.T) map[string]string {
	orig, err := os.ReadFile("../Pulumi.dev.yaml")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "Pulumi.dev.yaml")
	require.NoError(t, os.WriteFile(path, orig, 0o644))
	_, err = stackfile.Edit(t.Context(), freeLock{}, path, stackfile.ClusterFlag("adoptBootstrap"))
	require.NoError(t, err)
	recorded, err := offlinetest.ReadStackConfig(path)
	require.NoError(t, err)
	maps.Copy(recorded, devSecrets)
	require.NotEqual(t, stackConfig(t, "dev", devSecrets)["milner:cluster"], recorded["milner:cluster"])
	return recorded
}

// freeLock is Milner's lock on a stack nobody else runs: taken at once.
type freeLock struct{}

func (freeLock) Lock(context.Context) (func(), error) { return func() {}, nil }

// A cluster bootstrapped outside this state declares no bootstrap, so no
// up can call the Bootstrap API, and its kubeconfig dials the first
// control plane's apply; the dev stack as committed declares one.
func TestAdoptedClusterDeclaresNoBootstrap(t *testing.T) {
	_, ok := runStack(t, "dev", adoptedDev(t)).ByName(tBootstrap, "milner-dev-bootstrap")
	assert.False(t, ok, "an adopted cluster declares a bootstrap")
	_, ok = runStack(t, "dev", stackConfig(t, "dev", devSecrets)).ByName(tBootstrap, "milner-dev-bootstrap")
	assert.True(t, ok, "the committed dev stack declares no bootstrap")
}

// Without the record, a state that lost the bootstrap plans a create, which
// a running cluster refuses: what `milner adopt` records it to avoid.
func TestUnrecordedBootstrapOnARunningClusterIsACreate(t *testing.T) {
	b, ok := runStack(t, "dev", stackConfig(t, "dev", devSecrets)).ByName(tBootstrap, "milner-dev-bootstrap")
	require.True(t, ok)
	require.Empty(t, b.Options.ImportID)
	r := newBootstrapRun(t, b.Options.IgnoreChanges)
	_, ops, err := r.op(nil, true)
	require.NoError(t, err)
	assert.Equal(t, []display.StepOp{deploy.OpCreate}, ops)
	_, _, err = r.op(nil, false)
	require.Error(t, err)
	assert.Equal(t, 1, r.prov.creates)
}
