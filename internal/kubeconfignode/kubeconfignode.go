// Package kubeconfignode chooses the control plane the cluster's Kubeconfig
// resource asks Talos for the admin kubeconfig, once per milner run, so
// that its renewal never dials a control plane that is gone.
//
// Why milner chooses: terraform-provider-talos v0.10.1's
// talos_cluster_kubeconfig dials its node and endpoint inputs (neither
// requires a replace) twice in its life: in Create, and in Update when the
// admin client certificate in state expires within
// certificate_renewal_duration (720h by default): ModifyPlan marks the
// kubeconfig unknown then, and Update calls Kubeconfig through
// talosClientOp(endpoint, node) with the node and endpoint of the plan
// (pkg/talos/talos_cluster_kubeconfig_resource.go, ModifyPlan and Update).
// An Update with no renewal due stores the plan and sends nothing. Milner
// used to take both inputs from the bootstrap's outputs, which ignore
// changes (the bootstrap is done once), so the renewal a year after the
// bring-up dialled the first control plane's original address, wherever
// that node had gone. Now they are a control plane of the current config,
// chosen here before the preview and kept for the update of the same run:
//
//   - the one the state's kubeconfig names, if it is still a control plane
//     of the config, not replaced in this run, and answers the Talos API;
//   - else the first control plane in config order that answers (the
//     others are asked at once, so a dead node costs one timeout);
//   - else, nothing answering, the recorded one if it is still a control
//     plane, else the first in config order.
//
// On a healthy cluster that is one Version call to the node the state
// names, and nothing changes in the plan. A change of node alone is an
// update that sends nothing (the renewal is not due) or renews through the
// new node. Without a client identity (no secrets bundle in state yet: a
// first bring-up, whose nodes have no config to answer with) nothing is
// asked. Plain `pulumi up` has no chooser: the first control plane in
// config order (stacks.RunOptions.KubeconfigNode).
package kubeconfignode

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
)

// Chooser chooses the kubeconfig's control plane once per set of control
// planes: the preview and the update of one milner run get the same one.
type Chooser struct {
	// Recorded is the node the state's kubeconfig names ("" none).
	Recorded string
	// Avoid are addresses not to choose while another control plane
	// answers: the nodes replaced in this run, whose API is down for part
	// of it.
	Avoid []netip.Addr
	// Answers reports whether the Talos API at an address answers; nil:
	// nothing is asked (no client identity yet).
	Answers func(ctx context.Context, address netip.Addr) bool

	mu   sync.Mutex
	memo map[string]netip.Addr
}

// Choose returns the control plane to ask, one of controlPlanes (their
// addresses, in config order); the zero Addr when there is none.
func (c *Chooser) Choose(ctx context.Context, controlPlanes []netip.Addr) netip.Addr {
	if len(controlPlanes) == 0 {
		return netip.Addr{}
	}
	key := key(controlPlanes)
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.memo[key]; ok {
		return a
	}
	a := c.choose(ctx, controlPlanes)
	if c.memo == nil {
		c.memo = map[string]netip.Addr{}
	}
	c.memo[key] = a
	return a
}

func key(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func (c *Chooser) choose(ctx context.Context, cps []netip.Addr) netip.Addr {
	recorded, err := netip.ParseAddr(c.Recorded)
	kept := err == nil && slices.Contains(cps, recorded)
	fallback := cps[0]
	if kept {
		fallback = recorded
	}
	if c.Answers == nil {
		return fallback
	}
	avoided := func(a netip.Addr) bool { return slices.Contains(c.Avoid, a) }
	if kept && !avoided(recorded) && c.Answers(ctx, recorded) {
		return recorded
	}
	answered := make([]bool, len(cps))
	var wg sync.WaitGroup
	for i, a := range cps {
		if (kept && a == recorded) || avoided(a) {
			continue
		}
		wg.Go(func() { answered[i] = c.Answers(ctx, a) })
	}
	wg.Wait()
	if i := slices.Index(answered, true); i >= 0 {
		return cps[i]
	}
	return fallback
}

// TalosAPI is a Chooser's Answers: the node's Talos API answers Version
// (an os:reader call) with tc, the cluster's admin client identity the
// Kubeconfig resource asks with, within timeout. endpoint is where an
// address is dialled; nil: the address itself (the client adds port
// 50000).
func TalosAPI(tc *clientconfig.Config, endpoint func(netip.Addr) string, timeout time.Duration) func(context.Context, netip.Addr) bool {
	return func(ctx context.Context, a netip.Addr) bool {
		ep := a.String()
		if endpoint != nil {
			ep = endpoint(a)
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(ep))
		if err != nil {
			return false
		}
		defer func() { _ = c.Close() }()
		_, err = c.Version(ctx)
		return err == nil
	}
}
