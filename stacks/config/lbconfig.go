package config

import "net/netip"

// LoadBalancerConfig is milner:loadBalancer: MetalLB in L2 mode, which
// gives every Service of type LoadBalancer an address of the pool and
// answers ARP for it on the node network. Every field has a default.
//
// Why MetalLB and not kube-vip for the apps: Talos already holds the API's
// VIP itself (machine.network.interfaces[].vip, an etcd election), so
// kube-vip's main use on Talos is taken; kube-vip's Service mode needs its
// own cloud provider (kube-vip-cloud-provider) to allocate addresses,
// which MetalLB's controller does from a pool it validates (webhook on
// IPAddressPool). MetalLB's L2 mode needs no router change, which a
// workstation's libvirt NAT network and a homelab LAN both lack.
type LoadBalancerConfig struct {
	// Enabled installs MetalLB (default true when a pool is known: the
	// full stack's milner:network.vipRange, or Pool on an existing cluster).
	Enabled *bool `json:"enabled,omitempty"`
	// Chart pins MetalLB's chart; see DefaultLoadBalancerChart.
	Chart ChartConfig `json:"chart"`
	// Namespace is MetalLB's namespace (PodSecurity privileged: the speaker
	// runs on the host network with NET_RAW to answer ARP). Default
	// metallb-system.
	Namespace string `json:"namespace,omitempty"`
	// Pool is the address range MetalLB hands out, only on an existing
	// cluster (startAt: apps), whose network Milner does not know. On a
	// stack that makes its cluster the pool is milner:network.vipRange,
	// kept off the nodes, the DHCP range, the gateway and the API VIP.
	Pool *RangeConfig `json:"pool,omitempty"`
}

// MetalLB's chart and the stack's defaults.
const (
	LoadBalancerChartName        = "metallb"
	DefaultLoadBalancerNamespace = "metallb-system"
	// LoadBalancerAppName is MetalLB's HelmApp logical name (a state contract).
	LoadBalancerAppName = "metallb"
)

// DefaultLoadBalancerChart is MetalLB's chart as its maintainers publish
// it (see PublishedCharts), at the version Milner pins.
var DefaultLoadBalancerChart = ChartConfig{
	Repo:    "https://metallb.github.io/metallb",
	Name:    LoadBalancerChartName,
	Version: "0.16.1",
}

// LBPool is the load balancer's address pool of a loaded config: the
// parsed range, or nil when the stack has none.
func (c *Config) LBPool() *RangeConfig {
	if c.StartAt == LayerApps {
		return c.LoadBalancer.Pool
	}
	return c.Network.VIPRange
}

// LBOn reports whether the stack installs the load balancer.
func (c *Config) LBOn() bool {
	if !c.StopAfter.Includes(LayerApps) || c.LBPool() == nil {
		return false
	}
	return c.LoadBalancer.Enabled == nil || *c.LoadBalancer.Enabled
}

// applyLoadBalancerDefaults fills milner:loadBalancer's unset values.
func (c *Config) applyLoadBalancerDefaults() {
	l := &c.LoadBalancer
	if l.Chart == (ChartConfig{}) {
		l.Chart = DefaultLoadBalancerChart
	}
	if l.Namespace == "" {
		l.Namespace = DefaultLoadBalancerNamespace
	}
}

// validateLoadBalancer checks milner:loadBalancer. The pool of a stack
// that makes its cluster is milner:network.vipRange, whose rules are the
// network's (validateNetwork, validateNodes, validateInput): inside the
// node network, off the gateway, the DHCP range, the API VIP and every
// node address (lbconfig_test.go holds each).
func (c *Config) validateLoadBalancer(p *problems, claim func(path, ns string)) {
	l := &c.LoadBalancer
	lp := Key("loadBalancer")
	switch {
	case c.StartAt != LayerApps && l.Pool != nil:
		p.addf(lp+".pool", "is for an existing cluster (startAt: apps); this stack's load-balancer pool is %s", Key("network")+".vipRange")
	case c.StartAt == LayerApps && l.Pool != nil:
		l.Pool.From, l.Pool.To = parsePoolAddr(p, lp+".pool.start", l.Pool.Start), parsePoolAddr(p, lp+".pool.end", l.Pool.End)
		if f, t := l.Pool.From, l.Pool.To; f.IsValid() && t.IsValid() && (f.Is4() != t.Is4() || t.Less(f)) {
			p.addf(lp+".pool", "start %s is after end %s, or of another address family", f, t)
			l.Pool.From, l.Pool.To = netip.Addr{}, netip.Addr{}
		}
	}
	if l.Enabled != nil && *l.Enabled && c.LBPool() == nil {
		p.addf(lp+".enabled", "is true but the stack has no pool: set %s", map[bool]string{true: lp + ".pool", false: Key("network") + ".vipRange"}[c.StartAt == LayerApps])
	}
	if !c.LBOn() {
		return
	}
	claim(lp+".namespace", l.Namespace)
	if !dnsLabel.MatchString(l.Namespace) {
		p.addf(lp+".namespace", "%q is not a lowercase DNS label", l.Namespace)
	}
	validateChart(p, lp+".chart", c.dir, &l.Chart)
}

// parsePoolAddr parses one end of an existing cluster's pool.
func parsePoolAddr(p *problems, path, s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || !a.IsGlobalUnicast() {
		p.addf(path, "%q is not a unicast IP address", s)
		return netip.Addr{}
	}
	return a
}
