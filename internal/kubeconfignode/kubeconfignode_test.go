package kubeconfignode_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	mtype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/kubeconfignode"
	"github.com/milner/milner/tests/talosapi"
)

// env is three configured control planes of Talos API doubles on
// loopback and a chooser asking them with the cluster's admin identity.
type env struct {
	c          *talosapi.Cluster
	cps        []*talosapi.Node
	addrs      []netip.Addr
	answers    func(context.Context, netip.Addr) bool
	maintained *talosapi.Node
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s, err := talosapi.NewSecrets("test", "https://127.0.0.1:1")
	require.NoError(t, err)
	cfg, err := s.Config(mtype.TypeControlPlane, "1.32.3")
	require.NoError(t, err)
	tc, err := s.Talosconfig()
	require.NoError(t, err)
	e := &env{c: talosapi.NewCluster()}
	t.Cleanup(func() { _ = e.c.Close() })
	for i, name := range []string{"cp-1", "cp-2", "cp-3"} {
		n, err := e.c.AddNode(name, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 32, byte(i + 1)}), 0), talosapi.WithPlatformConfig(cfg))
		require.NoError(t, err)
		e.cps, e.addrs = append(e.cps, n), append(e.addrs, n.IP())
	}
	// A fourth node in maintenance mode: it answers TLS without the
	// cluster's CA, which is no answer of the cluster's Talos API.
	e.maintained, err = e.c.AddNode("cp-4", netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 32, 4}), 0))
	require.NoError(t, err)
	e.answers = kubeconfignode.TalosAPI(tc, func(a netip.Addr) string {
		for _, n := range e.c.Nodes() {
			if n.IP() == a {
				return n.Endpoint()
			}
		}
		return a.String()
	}, 5*time.Second)
	return e
}

// versions is how many Version calls each node took.
func (e *env) versions() map[string]int {
	out := map[string]int{}
	for _, c := range e.c.Journal().Calls("Version") {
		out[c.Node]++
	}
	return out
}

// On a healthy cluster the recorded control plane is kept, asked once,
// and a second Choose of the same run asks nothing.
func TestRecordedControlPlaneThatAnswersIsKept(t *testing.T) {
	e := newEnv(t)
	ch := &kubeconfignode.Chooser{Recorded: e.addrs[1].String(), Answers: e.answers}
	ctx := context.Background()
	assert.Equal(t, e.addrs[1], ch.Choose(ctx, e.addrs))
	assert.Equal(t, map[string]int{"cp-2": 1}, e.versions(), "one Version call, to the recorded node")
	assert.Equal(t, e.addrs[1], ch.Choose(ctx, e.addrs))
	assert.Equal(t, map[string]int{"cp-2": 1}, e.versions(), "the run's second ask sent something")
	assert.Empty(t, e.c.Journal().Calls("ApplyConfiguration"))
}

// The recorded control plane gone (unreachable, powered off, or no longer
// in the config): the first control plane in config order that answers.
func TestGoneControlPlaneIsLeft(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, e.cps[0].SetReachable(false))
	ch := &kubeconfignode.Chooser{Recorded: e.addrs[0].String(), Answers: e.answers}
	assert.Equal(t, e.addrs[1], ch.Choose(ctx, e.addrs), "cp-1 unreachable")

	require.NoError(t, e.cps[1].PowerOff())
	ch = &kubeconfignode.Chooser{Recorded: e.addrs[0].String(), Answers: e.answers}
	assert.Equal(t, e.addrs[2], ch.Choose(ctx, e.addrs), "cp-1 unreachable, cp-2 off")

	require.NoError(t, e.cps[0].SetReachable(true))
	ch = &kubeconfignode.Chooser{Recorded: "10.9.9.9", Answers: e.answers}
	assert.Equal(t, e.addrs[0], ch.Choose(ctx, e.addrs), "the recorded node is no control plane of the config")

	ch = &kubeconfignode.Chooser{Recorded: e.addrs[0].String(), Answers: e.answers}
	assert.Equal(t, e.addrs[2], ch.Choose(ctx, []netip.Addr{e.maintained.IP(), e.addrs[1], e.addrs[2]}),
		"a node in maintenance mode (or off) does not answer the cluster's Talos API")
}

// A control plane replaced in this run is avoided while another answers.
func TestReplacedControlPlaneIsAvoided(t *testing.T) {
	e := newEnv(t)
	ch := &kubeconfignode.Chooser{Recorded: e.addrs[1].String(), Avoid: []netip.Addr{e.addrs[1]}, Answers: e.answers}
	assert.Equal(t, e.addrs[0], ch.Choose(context.Background(), e.addrs))
	assert.Zero(t, e.versions()["cp-2"], "the replaced node was asked")
}

// Nothing answers: the recorded control plane if it still is one (no
// change planned for nothing), else the first in config order; without a
// client identity nothing is asked.
func TestNoAnswerKeepsWhatIsKnown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, n := range e.cps {
		require.NoError(t, n.SetReachable(false))
	}
	ch := &kubeconfignode.Chooser{Recorded: e.addrs[2].String(), Answers: e.answers}
	assert.Equal(t, e.addrs[2], ch.Choose(ctx, e.addrs))
	ch = &kubeconfignode.Chooser{Recorded: "10.9.9.9", Answers: e.answers}
	assert.Equal(t, e.addrs[0], ch.Choose(ctx, e.addrs))

	for _, n := range e.cps {
		require.NoError(t, n.SetReachable(true))
	}
	mark := len(e.c.Journal())
	assert.Equal(t, e.addrs[0], (&kubeconfignode.Chooser{}).Choose(ctx, e.addrs), "a first bring-up")
	assert.Equal(t, e.addrs[1], (&kubeconfignode.Chooser{Recorded: e.addrs[1].String()}).Choose(ctx, e.addrs))
	assert.Len(t, e.c.Journal(), mark, "a chooser without a client identity asked a node")
	assert.False(t, (&kubeconfignode.Chooser{}).Choose(ctx, nil).IsValid())
}
