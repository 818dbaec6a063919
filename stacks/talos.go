package stacks

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/client"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/cluster"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"

	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/components/talosnode"
)

// SecretOutputs are the outputs of the cluster secrets bundle the engine must
// store encrypted (the provider's schema does not mark them).
var SecretOutputs = []string{"machineSecrets", "clientConfiguration"}

// deployTalos creates the cluster secrets once, applies every node's
// configuration, bootstraps the first control plane, and gates the
// kubeconfig on the cluster health check.
func deployTalos(ctx *pulumi.Context, cfg *Config, nodes []substrate.Node) (*TalosLayer, error) {
	name := cfg.Cluster.Name
	// One secrets bundle per cluster, for its whole life: a new bundle is a
	// new cluster, so it is protected; the Talos version only chose its
	// format at creation, so a version bump must not touch it.
	secrets, err := machine.NewSecrets(ctx, name+"-secrets", &machine.SecretsArgs{
		TalosVersion: pulumi.String(cfg.Cluster.TalosVersion),
	},
		pulumi.Protect(true),
		pulumi.AdditionalSecretOutputs(SecretOutputs),
		pulumi.IgnoreChanges([]string{"talosVersion"}),
	)
	if err != nil {
		return nil, fmt.Errorf("talos %q: secrets: %w", name, err)
	}
	clientCfg := secrets.ClientConfiguration

	layer := &TalosLayer{Secrets: secrets}
	var bootstrap *machine.Bootstrap
	var applied []pulumi.Resource
	var controlPlanes, workers pulumi.StringArray
	extra, err := cfg.extraPatches()
	if err != nil {
		return nil, fmt.Errorf("talos %q: %w", name, err)
	}
	for i, n := range nodes {
		spec := cfg.Nodes[i]
		node, err := talosnode.New(ctx, n.Name, &talosnode.Args{
			Node:                n,
			MAC:                 spec.MAC,
			ClusterName:         name,
			ClusterEndpoint:     cfg.Endpoint(),
			VIP:                 cfg.Cluster.VIPAddr,
			Prefix:              cfg.Network.Prefix,
			Gateway:             cfg.Network.GatewayAddr,
			Nameservers:         cfg.Network.NameserverAddrs,
			TalosVersion:        cfg.Cluster.TalosVersion,
			KubernetesVersion:   cfg.Cluster.KubernetesVersion,
			InstallImage:        cfg.Cluster.InstallImage,
			MachineSecrets:      secrets.MachineSecrets,
			ClientConfiguration: clientCfg,
			// Exactly one bootstrap: the first control plane in config order.
			Bootstrap:    bootstrap == nil && n.Role == substrate.RoleControlPlane,
			ExtraPatches: extra[n.Name],
		})
		if err != nil {
			return nil, err
		}
		layer.Nodes = append(layer.Nodes, node)
		applied = append(applied, node.Apply)
		if node.Bootstrap != nil {
			bootstrap = node.Bootstrap
			applied = append(applied, bootstrap)
		}
		if n.Role == substrate.RoleControlPlane {
			controlPlanes = append(controlPlanes, pulumi.String(n.Address.String()))
		} else {
			workers = append(workers, pulumi.String(n.Address.String()))
		}
	}
	if bootstrap == nil {
		return nil, fmt.Errorf("talos %q: no control plane to bootstrap", name)
	}

	kubeconfig, err := cluster.NewKubeconfig(ctx, name+"-kubeconfig", &cluster.KubeconfigArgs{
		ClientConfiguration: cluster.KubeconfigClientConfigurationArgs{
			CaCertificate:     clientCfg.CaCertificate(),
			ClientCertificate: clientCfg.ClientCertificate(),
			ClientKey:         clientCfg.ClientKey(),
		},
		// From the bootstrap's outputs: a kubeconfig only once etcd exists.
		Node:     bootstrap.Node,
		Endpoint: bootstrap.Endpoint,
	})
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

	// The health check has no data edge to the nodes (its inputs are plain
	// addresses), so it depends on every applied config and the bootstrap.
	health := cluster.GetHealthOutput(ctx, cluster.GetHealthOutputArgs{
		ClientConfiguration: cluster.GetHealthClientConfigurationArgs{
			CaCertificate:     clientCfg.CaCertificate(),
			ClientCertificate: clientCfg.ClientCertificate(),
			ClientKey:         clientCfg.ClientKey(),
		},
		ControlPlaneNodes: controlPlanes,
		WorkerNodes:       workers,
		Endpoints:         controlPlanes,
	}, pulumi.DependsOn(applied))
	layer.HealthyKubeconfig = health.Id().ApplyT(func(string) pulumi.StringOutput {
		return layer.Kubeconfig
	}).(pulumi.StringOutput)
	return layer, nil
}
