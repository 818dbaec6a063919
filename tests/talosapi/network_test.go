package talosapi_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/tests/talosapi"
)

var testVIP = netip.MustParseAddr("10.9.9.240")

// withInterface is cfg with Milner's interface patch (components/talosnode
// Patch): the static address of node i on the link deviceSelector mac
// selects, and the VIP.
func withInterface(t *testing.T, cfg []byte, i int, mac string) []byte {
	t.Helper()
	return patch(t, cfg, fmt.Sprintf(`machine:
  network:
    interfaces:
      - deviceSelector: {hardwareAddr: %q}
        addresses: [%s/8]
        vip: {ip: %s}
`, mac, ip(i).Addr(), testVIP))
}

// holder names the node holding testVIP ("": none).
func holder(e *env) string {
	if h := e.c.VIPHolder(testVIP); h != nil {
		return h.Name()
	}
	return ""
}

// answers reports whether the node answers Version.
func answers(e *env, n *talosapi.Node) bool {
	c, cancel := contextWithTimeout(2 * time.Second)
	defer cancel()
	_, err := e.client(n).Version(c)
	return err == nil
}

// A node takes its static address only where the config's deviceSelector
// matches its link's MAC (Talos v1.13.9 DeviceConfigController skips a
// device whose selector matches nothing); without it, it has the address
// only if DHCP gives it, and never the VIP.
func TestDeviceSelectorDecidesTheStaticAddress(t *testing.T) {
	e := newEnv(t)
	const mac = "52:54:00:00:00:11"
	right := e.configured("cp-1", 1, withInterface(t, e.cp, 1, mac), talosapi.WithMAC(mac), talosapi.WithoutDHCPLease())
	wrong := e.configured("cp-2", 2, withInterface(t, e.cp, 2, "52:54:00:00:00:99"), talosapi.WithMAC("52:54:00:00:00:12"), talosapi.WithoutDHCPLease())
	leased := e.configured("cp-3", 3, withInterface(t, e.cp, 3, "52:54:00:00:00:99"), talosapi.WithMAC("52:54:00:00:00:13"))

	assert.True(t, answers(e, right), "the selector matches: the node holds its static address")
	assert.True(t, wrong.Status().On, "the node runs")
	assert.False(t, answers(e, wrong), "the selector matches no link and no DHCP lease: nothing at the static address")
	assert.True(t, answers(e, leased), "no link matched, but DHCP hands the MAC its reserved address")
	var skipped []string
	for _, en := range e.c.Journal() {
		if en.Event == "network" && strings.Contains(en.Detail, "no matching network device for defined selector") {
			skipped = append(skipped, en.Node)
		}
	}
	assert.ElementsMatch(t, []string{"cp-2", "cp-3"}, skipped, "the skipped device is journaled as Talos logs it")

	// Without a matched device the node carries no VIP, even as the only
	// running etcd member.
	require.NoError(t, leased.BootstrapEtcd())
	waitFor(t, "cp-1 and cp-2 to join etcd", func() bool { return len(e.c.EtcdMembers()) == 3 })
	assert.Equal(t, "cp-1", holder(e), "of the three members only cp-1's VIP device matched its link")

	// A NO_REBOOT apply moving the selector off the MAC takes the address
	// away at once, after the answer.
	_, err := e.client(right).ApplyConfiguration(ctx(t), &machine.ApplyConfigurationRequest{
		Data: withInterface(t, e.cp, 1, "52:54:00:00:00:99"), Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	require.NoError(t, err)
	waitFor(t, "cp-1 to drop its static address", func() bool { return !answers(e, right) })
	assert.Empty(t, holder(e), "cp-1's VIP went with its device; no other member's device matched")
}

// The VIP is held by one control plane, elected through etcd: nobody
// before etcd runs, the bootstrapped node first; a graceful reboot of the
// holder hands it to the next campaigner at once, a power cut only after
// the holder's lease expired (Talos v1.13.9 operator/vip.go).
func TestVIPElection(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	e := newEnv(t, talosapi.WithVIPLeaseTTL(ttl))
	const mac = "52:54:00:*"
	cp1 := e.configured("cp-1", 1, withInterface(t, e.cp, 1, mac))
	cp2 := e.configured("cp-2", 2, withInterface(t, e.cp, 2, mac))
	e.configured("cp-3", 3, withInterface(t, e.cp, 3, mac))
	holder := func() string { return holder(e) }
	assert.Empty(t, holder(), "no etcd yet: nobody campaigns")

	require.NoError(t, cp1.BootstrapEtcd())
	assert.Equal(t, "cp-1", holder(), "the bootstrapped control plane wins the first campaign")
	waitFor(t, "cp-2 and cp-3 to join etcd", func() bool { return len(e.c.EtcdMembers()) == 3 })
	assert.Equal(t, "cp-1", holder(), "the holder keeps it while the others join")

	err := e.client(cp1).Reboot(ctx(t))
	require.NoError(t, err)
	start := time.Now()
	waitFor(t, "the VIP to move off rebooting cp-1", func() bool { h := holder(); return h != "" && h != "cp-1" })
	assert.Less(t, time.Since(start), ttl, "a graceful reboot resigns: no lease to wait out")
	assert.Equal(t, "cp-2", holder(), "the next campaigner in the queue")

	waitFor(t, "cp-1 back from its reboot", func() bool { return cp1.Status().Booted })
	require.NoError(t, cp2.PowerOff())
	assert.Empty(t, holder(), "a power cut leaves the lease to expire")
	time.Sleep(ttl / 2)
	assert.Empty(t, holder(), "still within the lease")
	waitFor(t, "the lease to expire", func() bool { return holder() != "" })

	assert.Equal(t, "cp-3", holder(), "cp-3 campaigned before cp-1 came back")

	require.NoError(t, cp2.PowerOn())
	waitFor(t, "cp-2 back", func() bool { return cp2.Status().Booted })
	e.c.Node("cp-3").SetEtcdRunning(false)
	assert.Empty(t, holder(), "cp-3's resign goes through its stopped etcd: the lease runs out first")
	waitFor(t, "the lease to expire", func() bool { return holder() != "" })
	assert.Equal(t, "cp-1", holder(), "cp-1 campaigned before cp-2 came back")

	// A network cut shorter than the lease: the holder keeps the VIP.
	e.c.Node("cp-3").SetEtcdRunning(true)
	require.NoError(t, cp1.SetReachable(false))
	time.Sleep(ttl / 3)
	assert.Equal(t, "cp-1", holder(), "cut off within the lease: still the holder")
	require.NoError(t, cp1.SetReachable(true))
	time.Sleep(ttl)
	assert.Equal(t, "cp-1", holder(), "back within the lease: still the holder")
	// Longer than the lease: the next campaigner takes it.
	require.NoError(t, cp1.SetReachable(false))
	waitFor(t, "the lease to run out", func() bool { return holder() != "cp-1" })
	assert.Equal(t, "cp-2", holder())
	var events []string
	for _, en := range e.c.Journal() {
		if en.Event == "vip" {
			events = append(events, en.Node+" "+en.Detail)
		}
	}
	assert.Equal(t, []string{"cp-1 acquired 10.9.9.240", "cp-1 released 10.9.9.240", "cp-2 acquired 10.9.9.240",
		"cp-2 released 10.9.9.240", "cp-3 acquired 10.9.9.240", "cp-3 released 10.9.9.240", "cp-1 acquired 10.9.9.240",
		"cp-1 released 10.9.9.240", "cp-2 acquired 10.9.9.240"}, events)
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
