package stacks

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/client"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/cluster"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"

	"github.com/milner/milner/components/lifecycle"
	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/components/talosnode"
	"github.com/milner/milner/internal/applymode"
	"github.com/milner/milner/stacks/config"
)

// SecretOutputs are the outputs of the cluster secrets bundle the engine must
// store encrypted (the provider's schema does not mark them).
var SecretOutputs = []string{"machineSecrets", "clientConfiguration"}

// BootstrapSecretOutputs are the Bootstrap outputs holding a private key:
// the talosctl admin client configuration.
var BootstrapSecretOutputs = []string{"clientConfiguration"}

// KubeconfigSecretOutputs are the Kubeconfig outputs holding a private key:
// the admin kubeconfig, its parsed client key (kubernetesClientConfiguration)
// and the talosctl client configuration.
var KubeconfigSecretOutputs = []string{"kubeconfigRaw", "kubernetesClientConfiguration", "clientConfiguration"}

// HealthTimeout bounds the cluster health check: a dead node fails the up
// after it instead of holding it.
const HealthTimeout = "10m"

// RenderedConfig is one node's rendered machine configuration, its own patch
// applied. It needs nothing of the machine, so a substrate may take it
// before the node exists (e.g. on a cloud-init drive).
type RenderedConfig struct {
	// Node is the node's facts.
	Node talosnode.Node
	// Patch is the node's own patch (talosnode.Patch), already in MachineConfiguration.
	Patch string
	// Patches are every patch the generator applied, in order: Patch, then
	// a control plane's milner:cluster.oidc patches.
	Patches []string
	// MachineConfiguration is the rendered config (secret: it holds the cluster's keys).
	MachineConfiguration pulumi.StringOutput
}

// talosNodes turns the substrate's node facts into TalosNode's, in config order.
func talosNodes(cfg *config.Config, nodes []substrate.Node) []talosnode.Node {
	out := make([]talosnode.Node, 0, len(nodes))
	for i, n := range nodes {
		out = append(out, talosnode.Node{
			Name:        n.Name,
			Role:        talosnode.Role(n.Role),
			Address:     n.Address,
			MAC:         cfg.Nodes[i].MAC,
			InstallDisk: n.InstallDisk,
			DataDisk:    n.DataDisk,
		})
	}
	return out
}

// newSecrets creates the cluster's one secrets bundle, or with importPath
// imports it from that file (SecretsBundle's one-shot import). A new bundle
// is a new cluster, so it is protected; its format follows the config
// contract at creation, and a later contract value must not touch it.
//
// An import does not ignore talosVersion: the provider's ImportState
// records talos_version "v1.3" ("v1.2" for a bundle with an AES-CBC
// secret) whatever the cluster runs (terraform-provider-talos v0.10.1
// talos_machine_secrets_resource.go, ImportState), and an ignored input
// keeps the imported value (pulumi v3.276.0 step_generator.go
// processIgnoreChanges), so every later up would see a contract change
// (upCmd's checkContract). Not ignored, the engine follows the import with
// an update that records the stack's milner:cluster.configContract; the
// provider's Update only stores talos_version (and renews a client
// certificate within a month of expiry), never a key of the bundle.
func newSecrets(ctx *pulumi.Context, cfg *config.Config, importPath string, hooks *lifecycle.Hooks) (*machine.Secrets, error) {
	name := cfg.Cluster.Name
	opts := []pulumi.ResourceOption{
		pulumi.Protect(true),
		// Policy: a plain `pulumi preview`/`up` refuses its delete or
		// replace too, naming Milner's rule (also where Protect was lifted).
		hooks.Secrets(),
		pulumi.AdditionalSecretOutputs(SecretOutputs),
	}
	if importPath == "" {
		opts = append(opts, pulumi.IgnoreChanges([]string{"talosVersion"}))
	} else {
		opts = append(opts, pulumi.Import(pulumi.ID(importPath)))
	}
	secrets, err := machine.NewSecrets(ctx, name+"-secrets", &machine.SecretsArgs{
		TalosVersion: pulumi.String(cfg.Cluster.ConfigContract),
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("talos %q: secrets: %w", name, err)
	}
	return secrets, nil
}

// SecretsBundle is the program that declares the cluster's secrets bundle
// alone, exactly as Program does (newSecrets: its logical name, inputs and
// options). With importPath it imports the bundle from that file: the
// program `milner secrets import` runs once, in an update targeted at the
// bundle (engine.Stack.UpTarget), so nothing else of the stack is touched
// and nothing else of the program (machines, config renders, the health
// check) runs. The import id is the path of a `talosctl gen secrets` YAML
// file (terraform-provider-talos v0.10.1 talos_machine_secrets ImportState
// reads req.ID as that file).
//
// Why through the program: the engine marks a registration's
// AdditionalSecretOutputs secret on each step's new state before the
// snapshot saves it (pkg/v3 v3.276.0 resource/deploy/step_executor.go,
// continueExecuteStep), so the checkpoint, and every history entry and
// backup the DIY backend copies from it, holds the bundle only in secret
// envelopes. `pulumi import` registers no AdditionalSecretOutputs
// (resource/deploy/import.go) and the provider's schema marks no output
// secret, so it wrote every CA key in the clear.
//
// Why once: the engine plans an import again whenever a goal's import id
// differs from the one the state recorded (resource/deploy/step_generator.go:
// "isImport := goal.Custom && goal.ID != "" && (old == nil || old.External ||
// oldImportID != goal.ID)"), and for a resource already in state that is an
// import-replacement. The path is a new temporary file each time, so Program
// never carries the import: its later runs register no id and plan "same".
func SecretsBundle(importPath string) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		cfg, err := config.Load(programConfig{ctx})
		if err != nil {
			return err
		}
		if !cfg.Declares(config.LayerTalos) {
			return fmt.Errorf("talos %q: the stack declares no Talos layer (milner:startAt, milner:stopAfter), so it has no secrets bundle", cfg.Cluster.Name)
		}
		hooks, err := registerHooks(ctx, cfg, lifecycle.Options{})
		if err != nil {
			return err
		}
		_, err = newSecrets(ctx, cfg, importPath, hooks)
		return err
	}
}

// RenderNodeConfigs renders every node's machine configuration from the
// cluster secrets: the generator runs with the config contract (upstream's
// talos_version: "keep it fixed at the version the cluster was created
// with"), and each node's own patch is applied through the generator's
// configPatches.
func RenderNodeConfigs(ctx *pulumi.Context, cfg *config.Config, secrets *machine.Secrets, nodes []talosnode.Node) ([]RenderedConfig, error) {
	pa := PatchArgs(cfg)
	// The control planes' API server flags of milner:cluster.oidc (a
	// cluster.* setting: Talos refuses it on a worker), after the node's own.
	oidc, err := oidcPatches(cfg.Cluster.OIDC)
	if err != nil {
		return nil, fmt.Errorf("talos %q: oidc patch: %w", cfg.Cluster.Name, err)
	}
	out := make([]RenderedConfig, 0, len(nodes))
	for _, n := range nodes {
		patch, err := talosnode.Patch(n, pa)
		if err != nil {
			return nil, fmt.Errorf("talos %q: node %q: patch: %w", cfg.Cluster.Name, n.Name, err)
		}
		patches := []string{patch}
		if n.Role == talosnode.RoleControlPlane {
			patches = append(patches, oidc...)
		}
		out = append(out, RenderedConfig{
			Node:                 n,
			Patch:                patch,
			Patches:              patches,
			MachineConfiguration: renderConfig(ctx, cfg, secrets, n.Role, patches...),
		})
	}
	return out, nil
}

// renderConfig renders one machine configuration of role with patches
// applied in order, as a secret (it holds the cluster's keys).
func renderConfig(ctx *pulumi.Context, cfg *config.Config, secrets *machine.Secrets, role talosnode.Role, patches ...string) pulumi.StringOutput {
	rendered := machine.GetConfigurationOutput(ctx, machine.GetConfigurationOutputArgs{
		ClusterName:       pulumi.String(cfg.Cluster.Name),
		ClusterEndpoint:   pulumi.String(cfg.Endpoint()),
		MachineType:       pulumi.String(string(role)),
		MachineSecrets:    secrets.MachineSecrets,
		TalosVersion:      pulumi.String(cfg.Cluster.ConfigContract),
		KubernetesVersion: pulumi.String(cfg.Cluster.KubernetesVersion),
		ConfigPatches:     pulumi.ToStringArray(patches),
		Docs:              pulumi.Bool(false),
		Examples:          pulumi.Bool(false),
	})
	return pulumi.ToSecret(rendered.MachineConfiguration()).(pulumi.StringOutput)
}

// decidedMode is the node's apply mode as opts.ApplyMode decides it from
// the config the provider will apply, or nil (talosnode.ApplyMode) without
// a decider. The mode names nothing secret, so it is not a secret.
func decidedMode(opts RunOptions, n talosnode.Node, cfg pulumi.StringOutput, patches []string, cc machine.ClientConfigurationOutput) pulumi.StringInput {
	if opts.ApplyMode == nil {
		return nil
	}
	mode := pulumi.All(cfg, cc).ApplyT(func(v []any) (string, error) {
		config, ok1 := v[0].(string)
		client, ok2 := v[1].(machine.ClientConfiguration)
		if !ok1 || !ok2 {
			return "", fmt.Errorf("talosnode %q: apply mode: unexpected inputs %T, %T", n.Name, v[0], v[1])
		}
		mode, err := opts.ApplyMode(applymode.Request{
			Node: n.Name, Address: n.Address, Config: config, Patches: patches,
			CA: client.CaCertificate, Cert: client.ClientCertificate, Key: client.ClientKey,
		})
		if err != nil {
			return "", fmt.Errorf("talosnode %q: apply mode: %w", n.Name, err)
		}
		return mode, nil
	}).(pulumi.StringOutput)
	return pulumi.Unsecret(mode).(pulumi.StringOutput)
}

// apiServerReady is the previous control plane's apply once
// RunOptions.AwaitAPIServer says its API server is Ready, for the next
// control plane's apply (or, after the last, the apps) to wait on: a
// config that restarts the API server never lands on two control planes
// at once, nor restarts one under the apps' requests. nil in a preview or
// without AwaitAPIServer.
func apiServerReady(ctx *pulumi.Context, opts RunOptions, prev talosnode.Node, apply *machine.ConfigurationApply) pulumi.ResourceArrayInput {
	if ctx.DryRun() || opts.AwaitAPIServer == nil {
		return nil
	}
	return apply.ID().ApplyT(func(string) ([]pulumi.Resource, error) {
		if err := opts.AwaitAPIServer(prev.Name, prev.Address); err != nil {
			return nil, fmt.Errorf("talosnode %q: %w", prev.Name, err)
		}
		return []pulumi.Resource{apply}, nil
	}).(pulumi.ResourceArrayOutput)
}

// PatchArgs are the cluster-wide values of every node's own patch.
func PatchArgs(cfg *config.Config) talosnode.PatchArgs {
	return talosnode.PatchArgs{
		VIP:                            cfg.Cluster.VIPAddr,
		Prefix:                         cfg.Network.Prefix,
		Gateway:                        cfg.Network.GatewayAddr,
		Nameservers:                    cfg.Network.NameserverAddrs,
		InstallImage:                   cfg.Cluster.InstallImage,
		AllowSchedulingOnControlPlanes: *cfg.Cluster.AllowSchedulingOnControlPlanes,
		DataMountpoint:                 config.DataMountpoint,
		HostnameDocument:               cfg.Cluster.HostnameDocument(),
	}
}

// talosConfigs are the Talos layer's inputs that need nothing of the
// machines: the cluster's secrets bundle, every node's rendered config and
// the other layers' patches per node. A Proxmox stack makes them before its
// substrate, to put each node's first config on its nocloud drive.
type talosConfigs struct {
	secrets *machine.Secrets
	configs []RenderedConfig
	extra   map[string][]string
}

// newTalosConfigs creates the cluster secrets once and renders every node's
// configuration.
func newTalosConfigs(ctx *pulumi.Context, cfg *config.Config, nodes []talosnode.Node, hooks *lifecycle.Hooks) (*talosConfigs, error) {
	secrets, err := newSecrets(ctx, cfg, "", hooks)
	if err != nil {
		return nil, err
	}
	configs, err := RenderNodeConfigs(ctx, cfg, secrets, nodes)
	if err != nil {
		return nil, err
	}
	// The other layers' node patches: the storage layer's kubelet mount,
	// the workloads' labels and taints on dedicated nodes.
	extra, err := extraPatches(cfg)
	if err != nil {
		return nil, fmt.Errorf("talos %q: %w", cfg.Cluster.Name, err)
	}
	return &talosConfigs{secrets: secrets, configs: configs, extra: extra}, nil
}

// deployTalos applies every node's configuration (control planes one at a
// time), bootstraps the cluster once, and gates the kubeconfig on the
// cluster health check.
func deployTalos(ctx *pulumi.Context, cfg *config.Config, machines []substrate.Node, tc *talosConfigs, opts RunOptions, hooks *lifecycle.Hooks) (*TalosLayer, error) {
	name := cfg.Cluster.Name
	secrets, configs, extra := tc.secrets, tc.configs, tc.extra
	clientCfg := secrets.ClientConfiguration

	layer := &TalosLayer{Secrets: secrets}
	var firstCP *talosnode.TalosNode
	var cps []*talosnode.TalosNode
	var cpAddrs []netip.Addr
	var prevCP *machine.ConfigurationApply
	var prevNode talosnode.Node
	var applied []pulumi.Resource
	var controlPlanes, workers pulumi.StringArray
	var aliases []pulumi.Alias
	vms := make([]pulumi.Resource, len(machines))
	for i, m := range machines {
		vms[i] = m.VM
	}
	for _, nc := range configs {
		n := nc.Node
		// Every apply waits for the machines (their VM resources: see
		// substrate.Node.VM); a control plane also waits for the previous
		// control plane's apply, so a change that needs a reboot takes at
		// most one etcd member down at a time.
		after := slices.Clone(vms)
		var afterReady pulumi.ResourceArrayInput
		if n.Role == talosnode.RoleControlPlane && prevCP != nil {
			after = append(after, prevCP)
			afterReady = apiServerReady(ctx, opts, prevNode, prevCP)
		}
		node, err := talosnode.New(ctx, n.Name, &talosnode.Args{
			Node:                 n,
			MachineConfiguration: nc.MachineConfiguration,
			ClientConfiguration:  clientCfg,
			After:                after,
			AfterReady:           afterReady,
			ExtraPatches:         extra[n.Name],
			ApplyMode:            decidedMode(opts, n, nc.MachineConfiguration, extra[n.Name], clientCfg),
		})
		if err != nil {
			return nil, err
		}
		layer.Nodes = append(layer.Nodes, node)
		applied = append(applied, node.Apply)
		if n.Role == talosnode.RoleControlPlane {
			prevCP, prevNode = node.Apply, n
			if firstCP == nil {
				firstCP = node
			}
			cps, cpAddrs = append(cps, node), append(cpAddrs, n.Address)
			// Stacks made before the cluster-level bootstrap hold it as
			// "<node>-bootstrap" under the first control plane's TalosNode;
			// at most one of these exists in a state.
			aliases = append(aliases, pulumi.Alias{Name: pulumi.String(n.Name + "-bootstrap"), Parent: node})
			controlPlanes = append(controlPlanes, pulumi.String(n.Address.String()))
		} else {
			workers = append(workers, pulumi.String(n.Address.String()))
		}
	}
	if firstCP == nil {
		return nil, fmt.Errorf("talos %q: no control plane to bootstrap", name)
	}

	// One bootstrap per cluster, named after the cluster: removing,
	// reordering or replacing nodes never plans another (Talos refuses a
	// second bootstrap of a running cluster). It is done once, so later
	// changes to the node it dialled are ignored. From the apply's output:
	// etcd is bootstrapped only after the node holds its configuration, and
	// a kubeconfig is asked for only once etcd exists.
	//
	// A cluster bootstrapped outside this state
	// (milner:cluster.adoptBootstrap, which `milner adopt` records on the
	// evidence of etcd's members) declares none: its bootstrap cannot be
	// imported with the Talos plugin users install. The provider's
	// ImportState sets a non-null timeouts object {create: null}
	// (terraform-provider-talos v0.10.1 talos_machine_bootstrap_resource.go),
	// and the bridge pulumi-talos v0.7.1 is built with
	// (pulumi-terraform-bridge v3.116.0 pkg/tfbridge/rawstate.go) gives
	// timeouts an empty raw-state delta that it then cannot recover for an
	// object: every import preview fails "rawStateRecoverNatural cannot
	// process Object values" (tests/integration TestTalosLayerOnRealPlugin,
	// "recover after state loss"; v3.120.0 drops that delta). Nothing needs
	// the resource once etcd runs: its Create is the Bootstrap call, its Read
	// and Delete do nothing.
	var bootstrapped []pulumi.Resource
	if !cfg.Cluster.AdoptBootstrap {
		bootstrap, err := machine.NewBootstrap(ctx, name+"-bootstrap", &machine.BootstrapArgs{
			ClientConfiguration: clientCfg,
			Node:                firstCP.Apply.Node,
			Endpoint:            firstCP.Apply.Endpoint,
		}, pulumi.IgnoreChanges([]string{"node", "endpoint"}),
			pulumi.Aliases(aliases),
			// Policy: a plain `pulumi preview`/`up` refuses its replace
			// (a second bootstrap), naming Milner's rule.
			hooks.Bootstrap(),
			pulumi.AdditionalSecretOutputs(BootstrapSecretOutputs),
		)
		if err != nil {
			return nil, fmt.Errorf("talos %q: bootstrap: %w", name, err)
		}
		layer.Bootstrap = bootstrap
		applied = append(applied, bootstrap)
		bootstrapped = append(bootstrapped, bootstrap)
	}

	// The admin kubeconfig, asked of a control plane of the current config
	// (RunOptions.KubeconfigNode; internal/kubeconfignode says why): not
	// of the bootstrap's node, which ignores changes, so its renewal a year
	// on never dials a control plane that is gone. The address is a plain
	// value, so a stack whose kubeconfig asked the first control plane
	// plans no change while that node stays. It is asked once that node
	// holds its config and etcd exists: after its apply and the bootstrap,
	// by dependency (no data edge).
	kc := 0
	if opts.KubeconfigNode != nil {
		chosen := opts.KubeconfigNode(slices.Clone(cpAddrs))
		if kc = slices.Index(cpAddrs, chosen); kc < 0 {
			return nil, fmt.Errorf("talos %q: kubeconfig: %s is no control plane of the config", name, chosen)
		}
	}
	kcAddr := pulumi.String(cpAddrs[kc].String())
	kubeconfig, err := cluster.NewKubeconfig(ctx, name+"-kubeconfig", &cluster.KubeconfigArgs{
		ClientConfiguration: cluster.KubeconfigClientConfigurationArgs{
			CaCertificate:     clientCfg.CaCertificate(),
			ClientCertificate: clientCfg.ClientCertificate(),
			ClientKey:         clientCfg.ClientKey(),
		},
		Node:     kcAddr,
		Endpoint: kcAddr,
	}, pulumi.AdditionalSecretOutputs(KubeconfigSecretOutputs),
		pulumi.DependsOn(append(bootstrapped, cps[kc].Apply)))
	if err != nil {
		return nil, fmt.Errorf("talos %q: kubeconfig: %w", name, err)
	}
	layer.Kubeconfig = pulumi.ToSecret(kubeconfig.KubeconfigRaw).(pulumi.StringOutput)

	talosconfig := client.GetConfigurationOutput(ctx, client.GetConfigurationOutputArgs{
		ClusterName: pulumi.String(name),
		ClientConfiguration: client.GetConfigurationClientConfigurationArgs{
			CaCertificate:     clientCfg.CaCertificate(),
			ClientCertificate: clientCfg.ClientCertificate(),
			ClientKey:         clientCfg.ClientKey(),
		},
		Endpoints: controlPlanes,
		Nodes:     append(append(pulumi.StringArray{}, controlPlanes...), workers...),
	})
	layer.Talosconfig = pulumi.ToSecret(talosconfig.TalosConfig()).(pulumi.StringOutput)

	// The health gate. The health check is an invoke: with known inputs it
	// would run in every preview and every up, and hang on a dead node, so
	// blocking the very recovery (`up --replace <node>`) meant to revive it.
	// It runs only in an update that changes the Talos layer (the caller
	// says so, RunOptions), never in a preview, and is bounded by
	// HealthTimeout. Otherwise the apps get the kubeconfig without it.
	//
	// Either way the apps' kubeconfig depends on the same resources (the
	// bundle, every applied config, the bootstrap): `milner up` applies
	// exactly its preview's plan, and the engine refuses a resource whose
	// dependencies differ from the plan's ("violates plan: dependencies
	// changed", pulumi pkg/v3 v3.276.0 resource/deploy/plan.go), which the
	// health check's output would add in an update.
	ready := []any{clientCfg.CaCertificate()}
	for _, r := range applied {
		ready = append(ready, r.URN())
	}
	// The last control plane has no next to wait for it, but the apps do:
	// its API server restarts after its apply returns (at the kubelet's
	// next poll, internal/apiready), and a restart in the middle of the
	// apps layer's first requests cuts them ("unexpected EOF"). Its output
	// is its apply, already among these dependencies, so the plan's
	// dependencies do not change.
	if last := apiServerReady(ctx, opts, prevNode, prevCP); last != nil {
		ready = append(ready, last)
	}
	if ctx.DryRun() || opts.SkipHealthCheck {
		layer.HealthyKubeconfig = resolvedAfter(layer.Kubeconfig, ready)
		return layer, nil
	}
	// No data edge to the nodes (its inputs are plain addresses), so it
	// depends on every applied config and the bootstrap.
	health := cluster.GetHealthOutput(ctx, cluster.GetHealthOutputArgs{
		ClientConfiguration: cluster.GetHealthClientConfigurationArgs{
			CaCertificate:     clientCfg.CaCertificate(),
			ClientCertificate: clientCfg.ClientCertificate(),
			ClientKey:         clientCfg.ClientKey(),
		},
		ControlPlaneNodes: controlPlanes,
		WorkerNodes:       workers,
		Endpoints:         controlPlanes,
		Timeouts:          cluster.GetHealthTimeoutsArgs{Read: pulumi.String(HealthTimeout)},
	}, pulumi.DependsOn(applied))
	layer.HealthyKubeconfig = resolvedAfter(layer.Kubeconfig, append(ready, health.Id()))
	return layer, nil
}

// resolvedAfter is v, resolved once every one of after is and depending on
// their resources.
func resolvedAfter(v pulumi.StringOutput, after []any) pulumi.StringOutput {
	return pulumi.All(append([]any{v}, after...)...).ApplyT(func(all []any) string {
		return all[0].(string)
	}).(pulumi.StringOutput)
}
