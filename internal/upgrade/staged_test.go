package upgrade_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	mtype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/components/vocab"
	. "github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/tests/talosapi"
)

// TestInventoryAsksWhetherAConfigIsStaged: the node says whether it holds
// a config for its next boot other than the one it runs (its persistent
// MachineConfig, Talos v1.10 on), whoever staged it; the reboot that
// applies it ends that; a v1.9 node cannot say, and the row says why.
func TestInventoryAsksWhetherAConfigIsStaged(t *testing.T) {
	s, err := talosapi.NewSecrets("test", "https://127.0.0.1:1")
	require.NoError(t, err)
	running, err := s.Config(mtype.TypeControlPlane, "1.32.3")
	require.NoError(t, err)
	next, err := s.Config(mtype.TypeControlPlane, "1.32.4")
	require.NoError(t, err)
	tc, err := s.Talosconfig()
	require.NoError(t, err)
	c := talosapi.NewCluster()
	t.Cleanup(func() { _ = c.Close() })
	var d Declared
	for i, v := range []string{"v1.13.9", "v1.9.5"} {
		n, err := c.AddNode("cp-"+v, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 32, byte(i + 1)}), 0),
			talosapi.WithVersion(v), talosapi.WithPlatformConfig(running))
		require.NoError(t, err)
		require.Eventually(t, func() bool { st := n.Status(); return st.Booted && !st.Maintenance }, 10*time.Second, 5*time.Millisecond)
		d.Nodes = append(d.Nodes, Node{Name: n.Name(), Role: vocab.RoleControlPlane, Endpoint: n.Endpoint()})
	}
	ctx := context.Background()
	inventory := func() []Row {
		cl, err := Connect(ctx, tc, d)
		require.NoError(t, err)
		defer func() { _ = cl.Close() }()
		return Inventory(ctx, cl)
	}
	rows := inventory()
	require.Empty(t, rows[0].Err)
	assert.Equal(t, StagedNo, rows[0].Staged, "a node running the config it boots")
	assert.Contains(t, rows[1].Staged, "not known", "Talos v1.9 has no persistent MachineConfig")

	tcl, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(d.Nodes[0].Endpoint))
	require.NoError(t, err)
	defer func() { _ = tcl.Close() }()
	_, err = tcl.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Mode: machine.ApplyConfigurationRequest_STAGED, Data: next})
	require.NoError(t, err)
	assert.Equal(t, StagedYes, inventory()[0].Staged, "a config staged on the node, by anyone")

	require.NoError(t, c.Nodes()[0].PowerCycle())
	require.Eventually(t, func() bool { return inventory()[0].Staged == StagedNo }, 10*time.Second, 20*time.Millisecond,
		"after the reboot the node runs the staged config")
}
