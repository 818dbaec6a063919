package pipeline

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
)

// hostOp is a run on a libvirt stack at uri with domain type domainType,
// declaring the layers startAt..stopAfter, its nodes on 10.73.0.0/24.
func hostOp(uri, domainType string, stopAfter config.Layer) *Op {
	return &Op{Ctx: context.Background(), cfg: &config.Config{
		StartAt: config.LayerSubstrate, StopAfter: stopAfter,
		Substrate: config.SubstrateConfig{Kind: config.KindLibvirt, Libvirt: &config.LibvirtConfig{URI: uri, DomainType: domainType}},
		Network:   config.NetworkConfig{CIDR: "10.73.0.0/24", Prefix: netip.MustParsePrefix("10.73.0.0/24")},
		Nodes: []config.NodeConfig{
			{Name: "cp-1", Addr: netip.MustParseAddr("10.73.0.11")},
			{Name: "cp-2", Addr: netip.MustParseAddr("10.73.0.12")},
		},
	}}
}

// refusal is the rule's refusal message, "" for none.
func refusal(t *testing.T, rule func(*Op) error, o *Op) string {
	t.Helper()
	err := rule(o)
	if err == nil {
		return ""
	}
	var ref *Refusal
	require.ErrorAs(t, err, &ref)
	return ref.Msg
}

// A kvm domain on a local libvirt is refused where this machine has no
// /dev/kvm, naming the key and the fix; qemu, a remote libvirt (whose KVM
// is its own machine's) and a stack without the substrate layer are not.
func TestKVMDomainNeedsDevKVM(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "kvm")
	require.NoError(t, os.WriteFile(present, nil, 0o600))
	absent := filepath.Join(dir, "no-kvm")
	t.Cleanup(func(old string) func() { return func() { devKVM = old } }(devKVM))
	rule := func(o *Op) error { _, err := libvirtKVM(o); return err }

	for _, c := range []struct {
		name, kvm, uri, domainType string
		stopAfter                  config.Layer
		refused                    bool
	}{
		{"kvm, system, no /dev/kvm", absent, "qemu:///system", "kvm", config.LayerApps, true},
		{"kvm, session, no /dev/kvm", absent, "qemu:///session", "kvm", config.LayerSubstrate, true},
		{"kvm, unix socket, no /dev/kvm", absent, "qemu+unix:///system", "kvm", config.LayerApps, true},
		{"kvm with /dev/kvm", present, "qemu:///system", "kvm", config.LayerApps, false},
		{"qemu without /dev/kvm", absent, "qemu:///system", "qemu", config.LayerApps, false},
		{"kvm on a remote libvirt", absent, "qemu+ssh://hv.example.org/system", "kvm", config.LayerSubstrate, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			devKVM = c.kvm
			msg := refusal(t, rule, hostOp(c.uri, c.domainType, c.stopAfter))
			if !c.refused {
				assert.Empty(t, msg)
				return
			}
			assert.Contains(t, msg, "milner:substrate.libvirt.domainType: kvm needs KVM")
			assert.Contains(t, msg, c.kvm)
			assert.Contains(t, msg, "Set domainType: qemu")
			assert.Contains(t, msg, "nothing was changed")
		})
	}
	devKVM = absent
	o := hostOp("qemu:///system", "kvm", config.LayerApps)
	o.cfg.StartAt = config.LayerTalos
	assert.Empty(t, refusal(t, rule, o), "no substrate declared: no domain is created")
	assert.Contains(t, rulesOf(previewRules), "libvirt-kvm")
	assert.Contains(t, rulesOf(upRules), "libvirt-kvm")
}

// routeTable is a /proc/net/route of this shape (x86-64: host byte order
// is little-endian): a default route through 192.0.2.1 on eth0, its own
// 192.0.2.0/24, and the extra lines given.
func routeTable(extra ...string) string {
	s := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
		"eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
	for _, l := range extra {
		s += l + "\n"
	}
	return s
}

// A stack declaring the Talos layer on a remote libvirt is refused where
// this machine has no route (but a default one) to its nodes' addresses;
// a route to the node network (a /24 through the libvirt host, a wider
// /16 over a VPN) lets it pass, as do a local libvirt and a stack that
// stops after the substrate (nothing is dialled).
func TestRemoteLibvirtNeedsARouteToTheNodes(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func(old string) func() { return func() { ipv4Routes = old } }(ipv4Routes))
	rule := func(o *Op) error { _, err := remoteNodeNetwork(o); return err }
	remote := "qemu+ssh://hv.example.org/system"

	for _, c := range []struct {
		name, routes, uri string
		stopAfter         config.Layer
		refused           bool
	}{
		{"remote, default route only", routeTable(), remote, config.LayerTalos, true},
		{"remote over tls, default route only", routeTable(), "qemu+tls://hv.example.org/system", config.LayerApps, true},
		{"remote, a route to another network", routeTable("tun0\t00004A0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0"), remote, config.LayerTalos, true},
		{"remote, the route is down", routeTable("eth0\t0000490A\t050200C0\t0002\t0\t0\t0\t00FFFFFF\t0\t0\t0"), remote, config.LayerTalos, true},
		{"remote, a reject route", routeTable("eth0\t0000490A\t00000000\t0201\t0\t0\t0\t00FFFFFF\t0\t0\t0"), remote, config.LayerTalos, true},
		{"remote, 10.73.0.0/24 via the libvirt host", routeTable("eth0\t0000490A\t050200C0\t0003\t0\t0\t0\t00FFFFFF\t0\t0\t0"), remote, config.LayerTalos, false},
		{"remote, 10.73.0.0/16 over a VPN", routeTable("tun0\t0000490A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0"), remote, config.LayerApps, false},
		{"remote, substrate only", routeTable(), remote, config.LayerSubstrate, false},
		{"local libvirt", routeTable(), "qemu:///system", config.LayerTalos, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ipv4Routes = filepath.Join(dir, "route")
			require.NoError(t, os.WriteFile(ipv4Routes, []byte(c.routes), 0o600))
			msg := refusal(t, rule, hostOp(c.uri, "kvm", c.stopAfter))
			if !c.refused {
				assert.Empty(t, msg)
				return
			}
			assert.Contains(t, msg, "milner:substrate.libvirt.uri: libvirt "+c.uri+" is on another machine")
			assert.Contains(t, msg, "no route to cp-1's address 10.73.0.11 (nodes[0]) in milner:network.cidr 10.73.0.0/24")
			assert.Contains(t, msg, "every Talos apply would time out after 10 minutes")
			assert.Contains(t, msg, "Add a route to 10.73.0.0/24")
		})
	}
	assert.Contains(t, rulesOf(previewRules), "remote-node-network")
	assert.Contains(t, rulesOf(upRules), "remote-node-network")
}
