package config

import "fmt"

// DefaultExistingClusterName names an existing cluster (startAt: apps) whose
// stack sets no milner:cluster.name: the Kubernetes provider is
// "<name>-k8s" and its cluster identifier <name>.
const DefaultExistingClusterName = "milner"

// decodeExistingCluster decodes the keys of a stack that starts at the apps
// layer: the cluster, machines and network belong to someone else, so their
// keys are refused (a stack that declared them would orphan them), except
// milner:cluster.name, which names the Kubernetes provider.
func decodeExistingCluster(src ConfigSource, cfg *Config, p *problems) {
	for _, k := range []string{"substrate", "network", "nodes"} {
		if _, set := lookup(src, k); set {
			p.addf(Key(k), "is not used when %s is apps (the cluster is given by the secret %s); remove it", Key("startAt"), Key(KubeconfigKey))
		}
	}
	var cl ClusterConfig
	if decodeOptional(src, "cluster", &cl, p) {
		for _, f := range []struct{ field, v string }{
			{"talosVersion", cl.TalosVersion}, {"configContract", cl.ConfigContract}, {"kubernetesVersion", cl.KubernetesVersion},
			{"vip", cl.VIP}, {"endpoint", cl.Endpoint}, {"installImage", cl.InstallImage},
		} {
			if f.v != "" {
				p.addf(Key("cluster."+f.field), "is not used when %s is apps; only cluster.name is read", Key("startAt"))
			}
		}
		if cl.OIDC != nil {
			p.addf(Key("cluster.oidc"), "is not used when %s is apps: the API server's flags are the Talos layer's; only cluster.name is read", Key("startAt"))
		}
	}
	cfg.Cluster.Name = cl.Name
	if cfg.Cluster.Name == "" {
		cfg.Cluster.Name = DefaultExistingClusterName
	}
}

// validateExistingCluster checks what a stack that starts at the apps layer
// declares of its cluster: its name, and that it declares the apps layer.
func (c *Config) validateExistingCluster(p *problems) {
	if !dnsLabel.MatchString(c.Cluster.Name) || len(c.Cluster.Name) > 32 {
		p.addf(Key("cluster.name"), "%q is not a lowercase DNS label of at most 32 characters", c.Cluster.Name)
	}
	if !c.StopAfter.Includes(LayerApps) {
		p.addf(Key("stopAfter"), "%q is before %s apps: the stack would declare nothing", c.StopAfter, Key("startAt"))
	}
}

// validateStartAt checks milner:startAt itself.
func (c *Config) validateStartAt(p *problems) {
	if c.StartAt != LayerSubstrate && c.StartAt != LayerApps {
		p.addf(Key("startAt"), "%s", fmt.Sprintf("unknown start %q (want %s, or %s on an existing cluster)", c.StartAt, LayerSubstrate, LayerApps))
	}
}
