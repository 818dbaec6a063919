// Package stacks is the Milner program: the typed stack config and the
// composition of its layers (substrate, Talos, apps). Every stack runs the
// same Program; only Pulumi.<stack>.yaml differs.
//
// Logical names are a state contract. Renaming one without an alias makes
// the engine plan a delete and a create of something live:
//   - "<cluster>" (the substrate component) and its children, see components/substrate;
//   - "<cluster>-secrets" (the Talos secrets bundle: a new one is a new cluster);
//   - "<node>" (TalosNode) and its "<node>-apply";
//   - "<cluster>-bootstrap" (one per cluster; aliased from the former
//     "<node>-bootstrap" under the first control plane's TalosNode);
//   - "<cluster>-kubeconfig", "<cluster>-k8s" (the Kubernetes provider;
//     <cluster> is "milner" on an existing cluster without milner:cluster.name);
//   - "local-path-provisioner" (the storage HelmApp) and its
//     "local-path-provisioner-class" (the default StorageClass);
//   - "<app>" (HelmApp) and its "<app>-ns", "<app>-release", "<app>-<secret>";
//   - "<workloads>" (Workloads) and its "-ns", "-quota", "-limits", "-priority".
package stacks

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumiconfig "github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"

	"github.com/milner/milner/components/lifecycle"
	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/components/talosnode"
	"github.com/milner/milner/internal/applymode"
	"github.com/milner/milner/internal/fileid"
	"github.com/milner/milner/stacks/config"
)

// Program is the Milner program. main runs it with pulumi.Run; tests, the
// milner command and the Automation API run this same function.
func Program(ctx *pulumi.Context) error { return run(ctx, RunOptions{}) }

// RunOptions are what one run of the program decides, beyond the stack's
// config: set by the operator command from the preview it gated.
type RunOptions struct {
	// SkipHealthCheck leaves the cluster health check out of an update
	// whose preview changes nothing in the Talos layer (a no-op, an app
	// change, or `--replace <node>` alone), so a dead node never blocks its
	// own recovery. Previews never run it.
	SkipHealthCheck bool
	// ApplyMode decides each node's Talos apply mode from what the node
	// answers (milner: applymode.Decider.Mode, which says why), or the
	// error the node refused its config's dry run with, which fails the
	// preview. nil, as under plain `pulumi up`: the provider's
	// staged_if_needing_reboot.
	ApplyMode func(applymode.Request) (string, error)
	// Adopt maps logical names of the apps layer's Kubernetes objects
	// (releases, namespaces, secrets, the workloads' objects, the storage
	// class) to the ids of the live objects they import: `milner adopt
	// --all`'s one-shot import of what the cluster already runs
	// (internal/appsadopt). nil, as under plain `pulumi up`: no import.
	Adopt map[string]string
	// AwaitAPIServer is called in an update after a control plane's apply
	// and before the next control plane's apply starts (after the last
	// one's, before the apps get the kubeconfig), with the node whose
	// config just landed: it returns once that node's API server is Ready
	// (a .cluster change restarts it live), or an error, which fails the
	// update before the next control plane is touched. milner sets it for
	// the control planes whose apply the reviewed plan updates
	// (internal/apiready). nil, as under plain `pulumi up` and in every
	// preview: the next control plane waits only for the apply itself.
	AwaitAPIServer func(node string, address netip.Addr) error
	// KubeconfigNode chooses, from the control planes' addresses in config
	// order, the one the cluster's Kubeconfig resource asks for the admin
	// kubeconfig (its node and endpoint inputs): milner keeps the one the
	// state names while it answers, else takes one that answers
	// (internal/kubeconfignode says why), decided once for its preview and
	// update. nil, as under plain `pulumi up`: the first control plane.
	KubeconfigNode func(controlPlanes []netip.Addr) netip.Addr
	// Lifecycle is what the run's lifecycle hooks are told (Gated, Allowed):
	// milner judges its previews with its gate and allows its plan's
	// targets. The zero value, as under plain `pulumi`: the hooks refuse
	// in every preview and update. DeclaresBootstrap is set by the program.
	Lifecycle lifecycle.Options
}

// NewProgram is Program with per-run options, read when the program runs
// (the operator command sets them between its preview and its update).
func NewProgram(opts *RunOptions) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error { return run(ctx, *opts) }
}

// run loads the config, declares every layer and exports the outputs.
func run(ctx *pulumi.Context, opts RunOptions) error {
	cfg, err := config.Load(programConfig{ctx})
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings {
		if err := ctx.Log.Warn(w, nil); err != nil {
			return err
		}
	}
	c, err := DeployWith(ctx, cfg, opts)
	if err != nil {
		return err
	}
	c.Export(ctx)
	return nil
}

// Cluster is everything one stack declares, layer by layer. A layer before
// cfg.StartAt or past cfg.StopAfter is left nil.
type Cluster struct {
	// Substrate is the machine layer.
	Substrate substrate.Substrate
	// Talos is the machine-configuration layer.
	Talos *TalosLayer
	// Apps is the apps layer: storage, Helm releases, workloads.
	Apps *AppsLayer
}

// TalosLayer is the cluster's Talos layer.
type TalosLayer struct {
	// Secrets is the cluster's one secrets bundle.
	Secrets *machine.Secrets
	// Nodes are the nodes' applied configurations, in config order.
	Nodes []*talosnode.TalosNode
	// Bootstrap is the cluster's one etcd bootstrap.
	Bootstrap *machine.Bootstrap
	// Kubeconfig is the admin kubeconfig (secret).
	Kubeconfig pulumi.StringOutput
	// Talosconfig is the talosctl client config (secret).
	Talosconfig pulumi.StringOutput
	// HealthyKubeconfig is Kubeconfig, resolved only after the cluster health
	// check passed: the gate between the Talos layer and the apps.
	HealthyKubeconfig pulumi.StringOutput
}

// Deploy declares every layer of cfg, up to cfg.StopAfter.
func Deploy(ctx *pulumi.Context, cfg *config.Config) (*Cluster, error) {
	return DeployWith(ctx, cfg, RunOptions{})
}

// DeployWith is Deploy with per-run options.
func DeployWith(ctx *pulumi.Context, cfg *config.Config, opts RunOptions) (*Cluster, error) {
	c := &Cluster{}
	// Every hook, whatever the stack declares: a resource the program no
	// longer declares is deleted with the hooks its state names.
	hooks, err := registerHooks(ctx, cfg, opts.Lifecycle)
	if err != nil {
		return nil, err
	}
	if cfg.StartAt == config.LayerApps {
		// An existing cluster: its kubeconfig is a secret key (Load has
		// checked it is set), and it stays a secret Output.
		if c.Apps, err = deployApps(ctx, cfg, secret(ctx, config.KubeconfigKey), opts.Adopt, hooks); err != nil {
			return nil, err
		}
		return c, nil
	}
	// A Proxmox node's first config goes on its nocloud drive
	// (firstconfig.go), so its Talos configs are made before its machines;
	// a libvirt stack makes them after, as it always has.
	var tc *talosConfigs
	var userData map[string]pulumi.StringInput
	if cfg.Substrate.Kind == config.KindProxmox && cfg.StopAfter.Includes(config.LayerTalos) {
		if tc, err = newTalosConfigs(ctx, cfg, talosNodes(cfg, plannedNodes(cfg)), hooks); err != nil {
			return nil, err
		}
		userData = firstBootConfigs(ctx, cfg, tc)
	}
	if c.Substrate, err = newSubstrate(ctx, cfg, userData, hooks); err != nil {
		return nil, err
	}
	if !cfg.StopAfter.Includes(config.LayerTalos) {
		return c, nil
	}
	if tc == nil {
		if tc, err = newTalosConfigs(ctx, cfg, talosNodes(cfg, c.Substrate.Nodes()), hooks); err != nil {
			return nil, err
		}
	} else if err := checkPlannedNodes(cfg, c.Substrate.Nodes()); err != nil {
		return nil, fmt.Errorf("talos %q: %w", cfg.Cluster.Name, err)
	}
	if c.Talos, err = deployTalos(ctx, cfg, c.Substrate.Nodes(), tc, opts, hooks); err != nil {
		return nil, err
	}
	if !cfg.StopAfter.Includes(config.LayerApps) {
		return c, nil
	}
	if c.Apps, err = deployApps(ctx, cfg, c.Talos.HealthyKubeconfig, opts.Adopt, hooks); err != nil {
		return nil, err
	}
	return c, nil
}

// newSubstrate creates the configured substrate implementation. userData,
// by node name, is each node's first machine config (Proxmox only).
func newSubstrate(ctx *pulumi.Context, cfg *config.Config, userData map[string]pulumi.StringInput, hooks *lifecycle.Hooks) (substrate.Substrate, error) {
	name := cfg.Cluster.Name
	net := cfg.Network
	switch cfg.Substrate.Kind {
	case config.KindLibvirt:
		lv := cfg.Substrate.Libvirt
		args := &substrate.LibvirtArgs{
			URI:         lv.URI,
			DomainType:  lv.DomainType,
			CPUMode:     lv.CPUMode,
			PoolPath:    lv.PoolPath,
			BootImage:   lv.BootSource(),
			NetworkMode: net.Mode,
			CIDR:        net.Prefix,
			Nodes:       nodeSpecs(cfg),
			DNSHosts:    dnsHosts(cfg),
			Adopt:       lv.Adopt,
			Hooks:       hooks,
		}
		if r := net.DHCPRange; r != nil {
			args.DHCPStart, args.DHCPEnd = r.From, r.To
		}
		// The volumes' files are on this machine only for a local URI:
		// there the state records which file each volume is, and the
		// substrate guard refuses one recreated at its path.
		if lv.Local() {
			args.Identify = fileid.Of
		}
		return substrate.NewLibvirt(ctx, name, args)
	case config.KindProxmox:
		px := cfg.Substrate.Proxmox
		return substrate.NewProxmox(ctx, name, &substrate.ProxmoxArgs{
			Endpoint: px.Endpoint,
			Insecure: px.Insecure,
			// Load has checked the token is set; it stays an Output, secret.
			APIToken:       secret(ctx, config.ProxmoxTokenKey),
			NodeName:       px.NodeName,
			OSDatastore:    px.OSDatastore,
			DataDatastore:  px.DataDatastore,
			ImageDatastore: px.ImageDatastore,
			Bridge:         px.Bridge,
			DiskInterface:  px.DiskInterface,
			ImageURL:       px.ImageURL,
			ImageSHA256:    px.ImageSHA256,
			TalosVersion:   cfg.Cluster.TalosVersion,
			Prefix:         net.Prefix,
			Gateway:        net.GatewayAddr,
			Nameservers:    net.NameserverAddrs,
			Nodes:          nodeSpecs(cfg),
			// Each node's first machine config, on its nocloud drive.
			UserData:          userData,
			SnippetsDatastore: px.SnippetsDatastore,
			SSH:               proxmoxSSH(ctx, px.SSH),
			Hooks:             hooks,
		})
	default:
		return nil, fmt.Errorf("substrate %q: unknown kind %q", name, cfg.Substrate.Kind)
	}
}

// proxmoxSSH is the provider's SSH access: the agent, or the secret key
// (Load has checked exactly one is set), which stays an Output, secret.
func proxmoxSSH(ctx *pulumi.Context, s *config.ProxmoxSSHConfig) *substrate.ProxmoxSSH {
	if s == nil {
		return nil
	}
	out := &substrate.ProxmoxSSH{Username: s.Username, Agent: s.Agent}
	if !s.Agent {
		out.PrivateKey = secret(ctx, config.ProxmoxSSHKeyKey)
	}
	return out
}

// Export sets the stack outputs: what a user of the stack needs to reach it.
func (c *Cluster) Export(ctx *pulumi.Context) {
	if c.Substrate == nil {
		return // an existing cluster: its user already holds its kubeconfig
	}
	nodes := pulumi.Array{}
	for _, n := range c.Substrate.Nodes() {
		nodes = append(nodes, pulumi.Map{
			"name":      pulumi.String(n.Name),
			"role":      pulumi.String(string(n.Role)),
			"address":   pulumi.String(n.Address.String()),
			"machineId": n.MachineID,
		})
	}
	ctx.Export("nodes", nodes)
	if c.Talos != nil {
		ctx.Export("kubeconfig", c.Talos.Kubeconfig)
		ctx.Export("talosconfig", c.Talos.Talosconfig)
	}
}

// NodeSpecs returns the nodes as substrate specs, in config order.
func nodeSpecs(c *config.Config) []substrate.NodeSpec {
	specs := make([]substrate.NodeSpec, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		specs = append(specs, substrate.NodeSpec{
			Name: n.Name, Role: n.Role, VCPU: n.VCPU, MemoryMiB: n.MemoryMiB,
			OSDiskGiB: n.OSDiskGiB, DataDiskGiB: n.DataDiskGiB,
			Address: n.Addr, MAC: n.MAC, VMID: n.VMID, AdoptID: n.AdoptID,
			Host: n.ProxmoxNode, HolderAdoptID: n.HolderAdoptID,
		})
	}
	return specs
}

// A *pulumi.Context is a config source: the program loads its stack with it.
var _ config.ConfigSource = (*pulumi.Context)(nil)

// programConfig is the program's config source: the context, which also
// lists its keys when the language host passed them in PULUMI_CONFIG
// (pulumi-language-go does; sdk v3.276.0 go/pulumi/run.go getEnvInfo reads
// them from there), so that plain `pulumi up` refuses an unknown milner:
// key as milner does. Milner's own engine loads the stack file first
// (internal/stackfile), which lists them.
type programConfig struct{ *pulumi.Context }

var _ config.KeyLister = programConfig{}

func (c programConfig) ConfigKeys() ([]string, bool) {
	return config.EnvKeys(os.Getenv(pulumi.EnvConfig), c.GetConfig)
}

// secret reads the secret milner:<k> as an Output; config.Load has checked
// that it is set, and set as a secret, wherever the stack needs it.
func secret(ctx *pulumi.Context, k string) pulumi.StringOutput {
	return pulumiconfig.GetSecret(ctx, config.Key(k))
}

// registerHooks registers the run's lifecycle hooks (components/lifecycle),
// telling them whether this run declares the cluster's bootstrap.
func registerHooks(ctx *pulumi.Context, cfg *config.Config, o lifecycle.Options) (*lifecycle.Hooks, error) {
	o.DeclaresBootstrap = cfg.Declares(config.LayerTalos) && !cfg.Cluster.AdoptBootstrap
	return lifecycle.Register(ctx, o)
}

// dnsHosts are the apps' names the libvirt network's DNS answers.
func dnsHosts(cfg *config.Config) []substrate.DNSHost {
	var out []substrate.DNSHost
	for _, n := range cfg.AppNames() {
		out = append(out, substrate.DNSHost{Hostname: n.Host, IP: n.Address})
	}
	return out
}
