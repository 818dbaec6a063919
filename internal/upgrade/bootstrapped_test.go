package upgrade

import (
	"context"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func askEtcd(t *testing.T, d Declared, talosconfig string) Etcd {
	t.Helper()
	cfg, err := clientconfig.Open(talosconfig)
	require.NoError(t, err)
	return AskEtcd(context.Background(), cfg, d, 5*time.Second)
}

// A cluster is bootstrapped when a control plane lists etcd members; a dead
// first control plane does not hide it, and workers are never asked.
func TestAskEtcdFindsMembersThroughAnyControlPlane(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	fc.node("cp-1").etcdDown = true
	e := askEtcd(t, d, tc)
	require.True(t, e.Bootstrapped(), e.String())
	assert.Equal(t, "cp-2", e.Node)
	assert.ElementsMatch(t, []string{"cp-1", "cp-2", "cp-3"}, e.Members)
	assert.Len(t, e.Unanswered, 1)
	for _, line := range fc.journal {
		assert.NotContains(t, line, "w-", "only control planes are asked")
	}
}

// VMs whose control planes list no members (etcd not running, never
// bootstrapped) are not a bootstrapped cluster.
func TestAskEtcdWithoutMembersIsNotBootstrapped(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		fc.node(n).etcdDown = true
	}
	e := askEtcd(t, d, tc)
	assert.False(t, e.Bootstrapped())
	assert.Len(t, e.Unanswered, 3)
	assert.Contains(t, e.String(), "etcd is not running")
}

// A node that does not answer at all (down, wrong CA) is not evidence.
func TestAskEtcdUnreachableIsNotBootstrapped(t *testing.T) {
	_, d, tc := newFake(t, fiveNodes()...)
	for i := range d.Nodes {
		d.Nodes[i].Endpoint = "127.0.0.1:1"
	}
	e := askEtcd(t, d, tc)
	assert.False(t, e.Bootstrapped())
	assert.Len(t, e.Unanswered, 3)
}

// Control planes that answer but list no member (an answer is not a
// bootstrap) are not a bootstrapped cluster either.
func TestAskEtcdAnswerWithoutMembersIsNotBootstrapped(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	for _, n := range fc.nodes {
		n.memberID = 0
	}
	e := askEtcd(t, d, tc)
	assert.False(t, e.Bootstrapped(), e.String())
	assert.Equal(t, []string{"cp-1: no members", "cp-2: no members", "cp-3: no members"}, e.Unanswered)
}
