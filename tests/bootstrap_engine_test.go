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
//   - ImportState sets only id "machine_bootstrap" (and null timeouts);
//     Read does nothing; Update stores the plan; Delete does nothing.
//
// The bootstrap's options are taken from the real program's registration
// (the recording mock), so the test fails if the program's options change.

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
	pkgresource "github.com/pulumi/pulumi/pkg/v3/resource"
	"github.com/pulumi/pulumi/pkg/v3/resource/deploy"
	"github.com/pulumi/pulumi/pkg/v3/resource/deploy/deploytest"
	"github.com/pulumi/pulumi/pkg/v3/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/property"

	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks"
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
		ReadF: func(_ context.Context, req plugin.ReadRequest) (plugin.ReadResponse, error) {
			// ImportState: the fixed id, nothing else; Read: a no-op.
			outs := property.NewMap(map[string]property.Value{"id": property.New(stacks.BootstrapImportID)})
			if req.State.Len() > 0 {
				outs = req.State
			}
			ins := property.Map{}
			return plugin.ReadResponse{ReadResult: plugin.ReadResult{ID: req.ID, Inputs: &ins, Outputs: &outs}, Status: resource.StatusOK}, nil
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

func newBootstrapRun(t *testing.T, importID string, ignore []string) *bootstrapRun {
	r := &bootstrapRun{t: t, prov: &talosBootstrapProvider{}, node: "10.73.0.11",
		reg: deploytest.ResourceOptions{ImportID: resource.ID(importID), IgnoreChanges: ignore}}
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

// programBootstrap is the real program's bootstrap registration on the dev
// stack, adopted (the record written as `milner adopt` writes it, into a
// copy of Pulumi.dev.yaml) or not.
func programBootstrap(t *testing.T, adopted bool) (importID string, ignore []string) {
	cfg := stackConfig(t, "dev", devSecrets)
	if adopted {
		orig, err := os.ReadFile("../Pulumi.dev.yaml")
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "Pulumi.dev.yaml")
		require.NoError(t, os.WriteFile(path, orig, 0o644))
		_, err = stackfile.SetClusterFlag(path, "adoptBootstrap")
		require.NoError(t, err)
		recorded, err := offlinetest.ReadStackConfig(path)
		require.NoError(t, err)
		maps.Copy(recorded, devSecrets)
		require.NotEqual(t, cfg["milner:cluster"], recorded["milner:cluster"])
		cfg = recorded
	}
	b, ok := runStack(t, "dev", cfg).ByName(tBootstrap, "milner-dev-bootstrap")
	require.True(t, ok)
	return b.Options.ImportID, b.Options.IgnoreChanges
}

// An adopted cluster's bootstrap is imported, a state-only record: the
// engine plans an import and an update, never a create, and the Bootstrap
// API is never called; after it, a preview plans nothing for it.
func TestAdoptedBootstrapIsImportedNeverCreated(t *testing.T) {
	id, ignore := programBootstrap(t, true)
	require.Equal(t, stacks.BootstrapImportID, id)
	r := newBootstrapRun(t, id, ignore)

	_, ops, err := r.op(nil, true)
	require.NoError(t, err)
	assert.NotContains(t, ops, deploy.OpCreate, "the preview after adoption plans no bootstrap")
	assert.Contains(t, ops, deploy.OpImport)

	snap, ops, err := r.op(nil, false)
	require.NoError(t, err)
	assert.NotContains(t, ops, deploy.OpCreate)
	assert.Zero(t, r.prov.creates, "the Bootstrap API is never called")
	var rec *pkgresource.State
	for _, s := range snap.Resources {
		if s.URN.Name() == "milner-dev-bootstrap" {
			rec = s
		}
	}
	require.NotNil(t, rec)
	assert.Equal(t, resource.ID(stacks.BootstrapImportID), rec.ID)
	assert.Equal(t, r.node, rec.Inputs["node"].StringValue(), "the follow-up update stored the program's node")

	_, ops, err = r.op(snap, true)
	require.NoError(t, err)
	assert.Equal(t, []display.StepOp{deploy.OpSame}, ops, "after the adoption the bootstrap is unchanged")

	// A later change of the first control plane is a state-only update.
	r.node = "10.73.0.12"
	_, ops, err = r.op(snap, false)
	require.NoError(t, err)
	assert.Equal(t, []display.StepOp{deploy.OpUpdate}, ops)
	assert.Zero(t, r.prov.creates)
}

// Why the adopted bootstrap ignores nothing: with the non-adopted options
// (node and endpoint ignored) the engine resets the ignored inputs to the
// import's, which has none, and the required node is gone.
func TestImportedBootstrapCannotIgnoreTheNode(t *testing.T) {
	_, ignore := programBootstrap(t, false)
	require.ElementsMatch(t, []string{"node", "endpoint"}, ignore)
	r := newBootstrapRun(t, stacks.BootstrapImportID, ignore)
	_, _, err := r.op(nil, false)
	require.Error(t, err, "an import that ignores the node leaves the required node empty")
	assert.Zero(t, r.prov.creates)
}

// Without the record, a state that lost the bootstrap plans a create, which
// a running cluster refuses: what `milner adopt` records it to avoid.
func TestUnrecordedBootstrapOnARunningClusterIsACreate(t *testing.T) {
	id, ignore := programBootstrap(t, false)
	require.Empty(t, id)
	r := newBootstrapRun(t, id, ignore)
	_, ops, err := r.op(nil, true)
	require.NoError(t, err)
	assert.Equal(t, []display.StepOp{deploy.OpCreate}, ops)
	_, _, err = r.op(nil, false)
	require.Error(t, err)
	assert.Equal(t, 1, r.prov.creates)
}
