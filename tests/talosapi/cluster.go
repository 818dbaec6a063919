package talosapi

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Cluster is the nodes of one Talos cluster and the journal of what they
// were asked. Its methods are safe for concurrent use.
type Cluster struct {
	// mu guards every node's state, the etcd model and the journal.
	mu      sync.Mutex
	nodes   []*Node
	journal []Entry
	etcd    etcdCluster
	vips    map[netip.Addr]*vipState // vip.go
	opts    clusterOptions
}

type clusterOptions struct {
	onShutdown    []func(*Node)
	onBoot        []func(*Node)
	rebootDown    time.Duration
	kubeconfigTTL time.Duration
	promoteAfter  time.Duration
	timeSync      time.Duration
	kube          kubernetes.Interface
	drain         DrainTiming
	installerPull time.Duration
	vipTTL        time.Duration
}

// Option configures a Cluster.
type Option func(*clusterOptions)

// OnShutdown calls f (in its own goroutine) when a node powers off after a
// Shutdown call or a Reset without reboot, as Talos powers the machine off
// at the end of its shutdown sequence: a scenario stops the node's VM
// there, so a replace does not wait out its stop timeout.
func OnShutdown(f func(*Node)) Option {
	return func(o *clusterOptions) { o.onShutdown = append(o.onShutdown, f) }
}

// OnBoot calls f after every boot of a node (its first, and each after a
// reboot, an upgrade or a power-on), before the node answers: a test
// scripts what a node comes back as there (SetVersion, SetNodeReady,
// SetEtcdErrors).
func OnBoot(f func(*Node)) Option {
	return func(o *clusterOptions) { o.onBoot = append(o.onBoot, f) }
}

// WithTimeSync is how long after each boot a node's time is in sync
// (default 0: at once). Talos marks it synced when its NTP (or PTP)
// source answered, or once machine.time.bootTimeout has passed since boot
// (internal/app/machined/pkg/controllers/time/sync.go; no bootTimeout:
// only the time source), and Bootstrap waits up to 5 s for it before it
// answers FailedPrecondition "time is not in sync yet"
// (v1alpha1_server.go Bootstrap), which the provider retries.
func WithTimeSync(d time.Duration) Option {
	return func(o *clusterOptions) { o.timeSync = d }
}

// WithRebootDowntime is how long a rebooting node does not answer
// (default 0: it listens again at once; a client still sees its
// connection closed).
func WithRebootDowntime(d time.Duration) Option {
	return func(o *clusterOptions) { o.rebootDown = d }
}

// WithKubeconfigTTL sets the lifetime of the admin client certificate in
// the kubeconfigs the nodes hand out, instead of the config's
// cluster.adminKubeconfig.certLifetime (Talos' default: one year). A test
// of the provider's renewal (720h before expiry by default) sets less.
func WithKubeconfigTTL(d time.Duration) Option {
	return func(o *clusterOptions) { o.kubeconfigTTL = d }
}

// WithLearnerPromotion is how long a control plane joining the running
// cluster stays an etcd learner before Talos' etcd service promotes it
// (default 0: it joins as a voting member at once). Talos asks for the
// promotion every 15 s until the learner has caught up (services/etcd.go
// promoteMember), so a real learner phase is about 15 s.
func WithLearnerPromotion(d time.Duration) Option {
	return func(o *clusterOptions) { o.promoteAfter = d }
}

// NewCluster returns a cluster without nodes.
func NewCluster(opts ...Option) *Cluster {
	c := &Cluster{}
	for _, o := range opts {
		o(&c.opts)
	}
	return c
}

// SetKubeconfigTTL changes WithKubeconfigTTL for the kubeconfigs handed
// out from now on.
func (c *Cluster) SetKubeconfigTTL(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opts.kubeconfigTTL = d
}

// AddNode adds a node listening on addr (port 0: a free port, kept for the
// node's life) and powers it on: without a config (see WithPlatformConfig)
// it boots into maintenance mode. Names and IPs are unique in a cluster
// (apid addresses nodes by IP).
func (c *Cluster) AddNode(name string, addr netip.AddrPort, opts ...NodeOption) (*Node, error) {
	n := newNode(c, name, addr)
	for _, o := range opts {
		o(&n.opts)
	}
	if err := n.applyOptions(); err != nil {
		return nil, fmt.Errorf("node %q: %w", name, err)
	}
	c.mu.Lock()
	for _, o := range c.nodes {
		if o.name == name || o.addr.Addr() == addr.Addr() {
			c.mu.Unlock()
			return nil, fmt.Errorf("node %q: name or IP %s already taken by node %q", name, addr.Addr(), o.name)
		}
	}
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	if n.opts.off {
		return n, nil
	}
	if err := n.PowerOn(); err != nil {
		return nil, err
	}
	return n, nil
}

// Node returns the named node, or nil.
func (c *Cluster) Node(name string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// Nodes returns the nodes in the order they were added.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// byIPLocked returns the node with this IP, or nil (c.mu held).
func (c *Cluster) byIPLocked(ip netip.Addr) *Node {
	for _, n := range c.nodes {
		if n.addr.Addr() == ip {
			return n
		}
	}
	return nil
}

// Close powers every node off.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.Nodes() {
		errs = append(errs, n.PowerOff())
	}
	return errors.Join(errs...)
}
