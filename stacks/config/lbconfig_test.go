package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
)

// TestLoadBalancerPoolRefusals is the load-balancer pool's table: on a
// stack that makes its cluster the pool is milner:network.vipRange, and a
// pool that would hand out an address already in use is refused before
// anything is touched, naming the key. Each row is one rule.
func TestLoadBalancerPoolRefusals(t *testing.T) {
	pool := func(start, end string) func(c obj) {
		return func(c obj) { at(c, "network")["vipRange"] = obj{"start": start, "end": end} }
	}
	runRefusals(t, []refusalCase{
		// A node's address inside the pool: MetalLB would give a Service the node's address.
		{"a node address", pool("10.9.0.10", "10.9.0.12"), "milner:nodes[0].address: 10.9.0.11 is inside the vipRange 10.9.0.10-10.9.0.12"},
		// The DHCP range: a lease and a Service would answer ARP for one address.
		{"the DHCP range", pool("10.9.0.195", "10.9.0.210"), "milner:network.vipRange: overlaps dhcpRange 10.9.0.100-10.9.0.199"},
		// The gateway: the speaker would answer ARP for the router.
		{"the gateway", pool("10.9.0.1", "10.9.0.5"), "milner:network.vipRange: contains the gateway 10.9.0.1"},
		// The API VIP: Talos' VIP and a Service would fight over the address.
		{"the API VIP", pool("10.9.0.236", "10.9.0.245"), "milner:cluster.vip: 10.9.0.240 is inside the load-balancer vipRange 10.9.0.236-10.9.0.245"},
		// Outside the node network: L2 mode answers ARP on the node's link only.
		{"off the node network", pool("10.8.0.241", "10.8.0.250"), "milner:network.vipRange.start: 10.8.0.241 is outside the node network"},
		{"reversed", pool("10.9.0.250", "10.9.0.241"), "milner:network.vipRange: start 10.9.0.250 is after end 10.9.0.241"},
		{"a pool set beside vipRange", func(c obj) { c["loadBalancer"] = obj{"pool": obj{"start": "10.9.0.241", "end": "10.9.0.242"}} },
			"milner:loadBalancer.pool: is for an existing cluster (startAt: apps); this stack's load-balancer pool is milner:network.vipRange"},
		{"enabled without a pool", func(c obj) {
			delete(at(c, "network"), "vipRange")
			c["loadBalancer"] = obj{"enabled": true}
		}, "milner:loadBalancer.enabled: is true but the stack has no pool: set milner:network.vipRange"},
		{"a chart of another source", func(c obj) {
			c["loadBalancer"] = obj{"chart": obj{"repo": "https://metallb.example.org", "name": "metallb", "version": "0.16.1"}}
		}, "milner:loadBalancer.chart"},
		{"a namespace of another layer", func(c obj) { c["loadBalancer"] = obj{"namespace": "local-path-storage"} },
			`milner:loadBalancer.namespace: "local-path-storage" is also the namespace of milner:storage`},
	})
}

// TestLoadBalancerPoolIsTheVIPRange: the base stack's pool is its
// vipRange, beside the API VIP; MetalLB is on by default and off on ask.
func TestLoadBalancerPoolIsTheVIPRange(t *testing.T) {
	cfg, err := configtest.Load(configtest.Raw(t, baseConfig()), "milner:vaultToken")
	require.NoError(t, err)
	require.True(t, cfg.LBOn())
	assert.Equal(t, "10.9.0.241-10.9.0.250", cfg.LBPool().From.String()+"-"+cfg.LBPool().To.String())
	assert.Equal(t, config.DefaultLoadBalancerChart, cfg.LoadBalancer.Chart)
	assert.Equal(t, "metallb-system", cfg.LoadBalancer.Namespace)

	c := baseConfig()
	c["loadBalancer"] = obj{"enabled": false}
	cfg, err = configtest.Load(configtest.Raw(t, c), "milner:vaultToken")
	require.NoError(t, err)
	assert.False(t, cfg.LBOn())
}

// TestLoadBalancerPoolOnAnExistingCluster: startAt apps has no node
// network, so its pool is milner:loadBalancer.pool, parsed and ordered.
func TestLoadBalancerPoolOnAnExistingCluster(t *testing.T) {
	load := func(p obj) (*config.Config, error) {
		c := obj{"startAt": "apps", "cluster": obj{"name": "x"}, "apps": baseConfig()["apps"], "loadBalancer": obj{"pool": p}}
		r := configtest.Raw(t, c)
		r["milner:kubeconfig"] = "apiVersion: v1"
		return configtest.Load(r, "milner:vaultToken", "milner:kubeconfig")
	}
	cfg, err := load(obj{"start": "10.73.0.241", "end": "10.73.0.250"})
	require.NoError(t, err)
	require.True(t, cfg.LBOn())
	assert.Equal(t, "10.73.0.241", cfg.LBPool().From.String())
	for p, want := range map[string]obj{
		"milner:loadBalancer.pool: start 10.73.0.250 is after end 10.73.0.241": {"start": "10.73.0.250", "end": "10.73.0.241"},
		`milner:loadBalancer.pool.start: "lb" is not a unicast IP address`:     {"start": "lb", "end": "10.73.0.241"},
	} {
		_, err := load(want)
		require.Error(t, err)
		assert.Contains(t, err.Error(), p)
	}
}
