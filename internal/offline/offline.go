// Package offline runs the Milner program without an engine, against a
// recording resource monitor: every resource registration and invoke is
// kept, with its inputs and options, so `milner check` (and the tests) can
// evaluate what the program asks for without an engine, a provider or a
// network. Nothing on the preview/up path runs it: the guards judge the
// engine's own preview.
package offline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/internal/gate"
)

// Registration is one resource the program registered.
type Registration struct {
	// Type is the resource type token.
	Type string
	// Name is the logical name.
	Name string
	// URN is the URN the mock assigned.
	URN string
	// Parent is the parent's URN ("" for children of the stack).
	Parent string
	// Custom is false for component resources.
	Custom bool
	// Provider is the provider reference of a custom resource.
	Provider string
	// Inputs are the resource inputs.
	Inputs resource.PropertyMap
	// Options holds the resource options.
	Options Options
}

// Options are the resource options of a registration.
type Options struct {
	Protect                 bool
	RetainOnDelete          bool
	DeleteBeforeReplace     bool
	ReplaceOnChanges        []string
	IgnoreChanges           []string
	AdditionalSecretOutputs []string
	ImportID                string
	Aliases                 int
	Dependencies            []string
	// BeforeDelete are the names of the resource hooks bound to run
	// before its delete (components/lifecycle).
	BeforeDelete []string
}

// Invoke is one provider function the program called.
type Invoke struct {
	// Token is the function token.
	Token string
	// Args are its arguments.
	Args resource.PropertyMap
	// Result is what the mock returned.
	Result resource.PropertyMap
}

// Recorder is a pulumi.MockResourceMonitor that records every call.
type Recorder struct {
	mu      sync.Mutex
	regs    []Registration
	invokes []Invoke
}

var _ pulumi.MockResourceMonitor = (*Recorder)(nil)

// NewResource records a registration and returns plausible outputs.
func (r *Recorder) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	reg := Registration{
		Type:     args.TypeToken,
		Name:     args.Name,
		URN:      fmt.Sprintf("urn:pulumi:mock::%s::%s::%s", vocab.Project, args.TypeToken, args.Name),
		Custom:   args.Custom,
		Provider: args.Provider,
		Inputs:   args.Inputs,
	}
	// RegisterRPC is nil for reads.
	if rpc := args.RegisterRPC; rpc != nil {
		reg.Parent = rpc.GetParent()
		reg.Options = Options{
			Protect:                 rpc.GetProtect(),
			RetainOnDelete:          rpc.GetRetainOnDelete(),
			DeleteBeforeReplace:     rpc.GetDeleteBeforeReplace(),
			ReplaceOnChanges:        rpc.GetReplaceOnChanges(),
			IgnoreChanges:           rpc.GetIgnoreChanges(),
			AdditionalSecretOutputs: rpc.GetAdditionalSecretOutputs(),
			ImportID:                rpc.GetImportId(),
			Aliases:                 len(rpc.GetAliases()),
			Dependencies:            rpc.GetDependencies(),
			BeforeDelete:            rpc.GetHooks().GetBeforeDelete(),
		}
	}
	r.mu.Lock()
	r.regs = append(r.regs, reg)
	r.mu.Unlock()

	id := args.Name + "-id"
	if args.ID != "" {
		id = args.ID
	}
	return id, mockOutputs(args.TypeToken, args.Inputs), nil
}

// Call records an invoke and returns plausible results.
func (r *Recorder) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) {
	result := mockResult(args.Token, args.Args)
	r.mu.Lock()
	r.invokes = append(r.invokes, Invoke{Token: args.Token, Args: args.Args, Result: result})
	r.mu.Unlock()
	return result, nil
}

// Registrations returns every registration, sorted by type and name.
func (r *Recorder) Registrations() []Registration {
	r.mu.Lock()
	defer r.mu.Unlock()
	regs := slices.Clone(r.regs)
	slices.SortFunc(regs, func(a, b Registration) int {
		return cmp.Or(strings.Compare(a.Type, b.Type), strings.Compare(a.Name, b.Name))
	})
	return regs
}

// Invokes returns every invoke, in call order.
func (r *Recorder) Invokes() []Invoke {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.invokes)
}

// ByType returns the registrations of one type token, sorted by name.
func (r *Recorder) ByType(token string) []Registration { return OfType(r.Registrations(), token) }

// ByName returns the registration of one type and logical name.
func (r *Recorder) ByName(token, name string) (Registration, bool) {
	return Find(r.Registrations(), token, name)
}

// OfType returns the registrations of one type token, in order.
func OfType(regs []Registration, token string) []Registration {
	var out []Registration
	for _, reg := range regs {
		if reg.Type == token {
			out = append(out, reg)
		}
	}
	return out
}

// Find returns the registration of one type token and logical name.
func Find(regs []Registration, token, name string) (Registration, bool) {
	i := slices.IndexFunc(regs, func(r Registration) bool { return r.Type == token && r.Name == name })
	if i < 0 {
		return Registration{}, false
	}
	return regs[i], true
}

// Run runs program for stack with the given raw config (full keys, e.g.
// milner:nodes) under a fresh Recorder. secretKeys marks keys as secret.
func Run(program pulumi.RunFunc, stack string, raw map[string]string, secretKeys ...string) (*Recorder, error) {
	rec := &Recorder{}
	ctx, err := pulumi.NewContext(context.Background(), pulumi.RunInfo{
		Project:          vocab.Project,
		Stack:            stack,
		Config:           raw,
		ConfigSecretKeys: secretKeys,
		Mocks:            rec,
	})
	if err != nil {
		return nil, err
	}
	runErr := pulumi.RunWithContext(ctx, program)
	return rec, errors.Join(runErr, ctx.Close())
}

// str builds a string property.
func str(s string) resource.PropertyValue { return resource.NewProperty(s) }

// mockOutputs returns a resource's inputs plus the outputs later resources read.
func mockOutputs(token string, inputs resource.PropertyMap) resource.PropertyMap {
	out := inputs.Copy()
	switch token {
	case gate.TypeTalosSecrets:
		out["machineSecrets"] = resource.NewProperty(resource.PropertyMap{
			"cluster": resource.NewProperty(resource.PropertyMap{"id": str("mock-cluster-id"), "secret": str("mock-cluster-secret")}),
		})
		out["clientConfiguration"] = resource.NewProperty(resource.PropertyMap{
			"caCertificate":     str("mock-ca"),
			"clientCertificate": str("mock-cert"),
			"clientKey":         str("mock-key"),
		})
	case gate.TypeConfigApply:
		out["resolvedApplyMode"] = str("auto")
	case gate.TypeKubeconfig:
		out["kubeconfigRaw"] = str("apiVersion: v1\nkind: Config\n# mock kubeconfig\n")
	case gate.TypeProxmoxVM:
		// Proxmox names every disk it creates in a datastore and reports the
		// name as its pathInDatastore (vm-<vmid>-disk-<n> on LVM-thin); a
		// VM that attaches disks by path reports the paths it was given.
		var disks []resource.PropertyValue
		for i, d := range inputs["disks"].ArrayValue() {
			disk := d.ObjectValue().Copy()
			if p, ok := disk["pathInDatastore"]; !ok || p.IsNull() {
				disk["pathInDatastore"] = str(fmt.Sprintf("vm-%d-disk-%d", int(inputs["vmId"].NumberValue()), i))
			}
			disks = append(disks, resource.NewProperty(disk))
		}
		if disks != nil {
			out["disks"] = resource.NewProperty(disks)
		}
	case gate.TypeHelmRelease:
		out["status"] = resource.NewProperty(resource.PropertyMap{"status": str("deployed"), "revision": resource.NewProperty(1.0)})
	}
	return out
}

// mockResult returns the result of an invoke.
func mockResult(token string, args resource.PropertyMap) resource.PropertyMap {
	out := args.Copy()
	switch token {
	case "talos:machine/getConfiguration:getConfiguration":
		// Deterministic in the inputs that matter, as the real data source
		// is: a contract, version or patch change (the patches are merged
		// into the rendered config) shows as a changed machine configuration.
		out["machineConfiguration"] = str(fmt.Sprintf("version: v1alpha1\n# %v %v %v %v %v\n",
			args["clusterName"].V, args["machineType"].V, args["talosVersion"].V, args["kubernetesVersion"].V, args["configPatches"].V))
	case "talos:client/getConfiguration:getConfiguration":
		out["talosConfig"] = str("context: mock\n")
	case "talos:cluster/getHealth:getHealth":
		out["id"] = str("healthy")
	}
	return out
}
