package stacks

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
		if _, set := src.GetConfig(key(k)); set {
			p.addf(key(k), "is not used when %s is apps (the cluster is given by the secret %s); remove it", key("startAt"), key(KubeconfigKey))
		}
	}
	var cl ClusterConfig
	if decodeOptional(src, "cluster", &cl, p) {
		for field, v := range map[string]string{
			"talosVersion": cl.TalosVersion, "kubernetesVersion": cl.KubernetesVersion, "vip": cl.VIP,
			"endpoint": cl.Endpoint, "installImage": cl.InstallImage,
		} {
			if v != "" {
				p.addf(key("cluster."+field), "is not used when %s is apps; only cluster.name is read", key("startAt"))
			}
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
		p.addf(key("cluster.name"), "%q is not a lowercase DNS label of at most 32 characters", c.Cluster.Name)
	}
	if !c.StopAfter.Includes(LayerApps) {
		p.addf(key("stopAfter"), "%q is before %s apps: the stack would declare nothing", c.StopAfter, key("startAt"))
	}
}

// validateStartAt checks milner:startAt itself.
func (c *Config) validateStartAt(p *problems) {
	if c.StartAt != LayerSubstrate && c.StartAt != LayerApps {
		p.addf(key("startAt"), "%s", fmt.Sprintf("unknown start %q (want %s, or %s on an existing cluster)", c.StartAt, LayerSubstrate, LayerApps))
	}
}
