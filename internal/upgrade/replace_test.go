package upgrade

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The Talos side of `milner up --replace` against the fake cluster (real
// gRPC, machinery's client and protos): a graceful shutdown of exactly the
// replaced nodes, the etcd member removal of a lost OS disk and its
// refusals, and the wait for the node to rejoin.

func threeControlPlanes() []fakeSpec {
	return []fakeSpec{
		{"cp-1", "controlplane", toTalos, k8sVer},
		{"cp-2", "controlplane", toTalos, k8sVer},
		{"cp-3", "controlplane", toTalos, k8sVer},
		{"w-1", "worker", toTalos, k8sVer},
	}
}

// vmNeverStops is a VM that keeps running whatever Talos was asked.
func vmNeverStops(context.Context, string) (bool, error) { return false, nil }

// vmStopsOnShutdown is the VM side of the fake: a node's VM stops once
// Talos received Shutdown (machined powers off at the end of its sequence).
func vmStopsOnShutdown(fc *fakeCluster) StoppedFunc {
	return func(_ context.Context, node string) (bool, error) {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		return fc.node(node).shutDown, nil
	}
}

// Only the replaced node is asked to shut down, without force (Talos then
// cordons and drains it), and the wait ends when its VM stopped. Fails
// with the Shutdown call removed from ShutdownForReplace (no Shutdown in
// the journal; the VM never stops), or with every declared node shut down.
func TestShutdownForReplaceShutsDownOnlyTheReplacedNode(t *testing.T) {
	fc, d, tc := newFake(t, threeControlPlanes()...)
	c := connect(t, d, tc)
	var out strings.Builder
	err := c.ShutdownForReplace(context.Background(), []string{"cp-2"}, vmStopsOnShutdown(fc), 2*time.Second, testOptions(&out))
	require.NoError(t, err)
	require.Equal(t, []string{"cp-2 Shutdown force=false"}, fc.calls("Shutdown"))
	require.Contains(t, out.String(), "cp-2: its VM has stopped; the replace deletes it")
}

// A dead node (nothing listens) is reported and the replace goes on: no
// error, and the call is bounded. Fails if ShutdownForReplace returned the
// call's error (the recovery of a dead node would stop there).
func TestShutdownForReplaceReportsADeadNodeAndGoesOn(t *testing.T) {
	fc, d, tc := newFake(t, threeControlPlanes()...)
	fc.node("cp-2").srv.Stop()
	c := connect(t, d, tc)
	var out strings.Builder
	start := time.Now()
	err := c.ShutdownForReplace(context.Background(), []string{"cp-2"}, vmStopsOnShutdown(fc), 2*time.Second, testOptions(&out))
	require.NoError(t, err)
	require.Less(t, time.Since(start), shutdownCallTimeout+time.Second)
	require.NotContains(t, out.String(), "Talos shuts down", "a dead node took the Shutdown call")
	require.Contains(t, out.String(), "cp-2: did not answer the Talos API")
	require.Contains(t, out.String(), "the replace goes on")
}

// A VM that does not stop is waited for no longer than the bound, then
// reported; the replace goes on.
func TestShutdownForReplaceWaitIsBounded(t *testing.T) {
	_, d, tc := newFake(t, threeControlPlanes()...)
	c := connect(t, d, tc)
	var out strings.Builder
	start := time.Now()
	err := c.ShutdownForReplace(context.Background(), []string{"cp-2"}, vmNeverStops, 200*time.Millisecond, testOptions(&out))
	require.NoError(t, err)
	require.Less(t, time.Since(start), 2*time.Second)
	require.NotContains(t, out.String(), "its VM has stopped")
	require.Contains(t, out.String(), "did not stop within 200ms")
}

// An interrupt while waiting stops the run before anything is deleted:
// the context's error comes back.
func TestShutdownForReplaceStopsOnInterrupt(t *testing.T) {
	_, d, tc := newFake(t, threeControlPlanes()...)
	c := connect(t, d, tc)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	var out strings.Builder
	err := c.ShutdownForReplace(ctx, []string{"cp-2"}, vmNeverStops, 5*time.Second, testOptions(&out))
	require.ErrorIs(t, err, context.Canceled)
}

// The lost OS disk of cp-2: its member is removed through another control
// plane, and the wait ends once cp-2 is a member again under a new id.
// Fails with the EtcdRemoveMemberByID call removed from Remove (the old id
// stays listed, so WaitRejoined never sees a new member and times out).
func TestOSDiskRemovesTheMemberAndWaitsForTheRejoin(t *testing.T) {
	fc, d, tc := newFake(t, threeControlPlanes()...)
	c := connect(t, d, tc)
	ctx := context.Background()
	var out strings.Builder
	o := testOptions(&out)

	r, err := c.MemberRemovalFor(ctx, "cp-2")
	require.NoError(t, err)
	require.Equal(t, &MemberRemoval{Node: "cp-2", Via: "cp-1", MemberID: 0x101, Voters: 3, Healthy: []string{"cp-1", "cp-3"}}, r)
	require.NoError(t, c.Remove(ctx, r, &out))
	require.Equal(t, []string{"cp-1 EtcdRemoveMemberByID 101"}, fc.calls("EtcdRemoveMemberByID"))

	// The fresh node takes its config in maintenance mode and joins etcd
	// (here: as the engine's apply would, some time after the removal).
	time.AfterFunc(100*time.Millisecond, func() {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if fc.node("cp-2").memberID == 0 {
			fc.node("cp-2").memberID = 0x201
		}
	})
	require.NoError(t, c.WaitRejoined(ctx, r, 2*time.Second, o))
	require.Contains(t, out.String(), "cp-2: an etcd member again")

	// A rerun after a failed apply finds no member to remove: NotFound is
	// no error (machined answers NotFound for an id that is not a member).
	require.NoError(t, c.Remove(ctx, r, &out))
}

// The refusals: the last control plane, and a removal after which the
// healthy members left would not make a quorum. A worker has no member.
// Nothing is removed in any of them. Fails with the quorum comparison
// removed from MemberRemovalFor (the two-dead case is not refused).
func TestOSDiskMemberRemovalRefusals(t *testing.T) {
	tests := []struct {
		name   string
		specs  []fakeSpec
		dead   []string
		node   string
		refuse string // "" when allowed
	}{
		{name: "last control plane", node: "cp-1", refuse: "last control plane",
			specs: []fakeSpec{{"cp-1", "controlplane", toTalos, k8sVer}, {"w-1", "worker", toTalos, k8sVer}}},
		{name: "another control plane dead", specs: threeControlPlanes(), dead: []string{"cp-3"}, node: "cp-2",
			refuse: "need 2 healthy for quorum, but only 1 are healthy"},
		{name: "every other control plane dead", specs: threeControlPlanes(), dead: []string{"cp-1", "cp-3"}, node: "cp-2",
			refuse: "no other control plane lists the etcd members"},
		{name: "the lost node itself dead", specs: threeControlPlanes(), dead: []string{"cp-2"}, node: "cp-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc, d, tc := newFake(t, tt.specs...)
			for _, n := range tt.dead {
				fc.node(n).srv.Stop()
			}
			c := connect(t, d, tc)
			r, err := c.MemberRemovalFor(context.Background(), tt.node)
			if tt.refuse == "" {
				require.NoError(t, err)
				require.Equal(t, uint64(0x101), r.MemberID)
				return
			}
			require.ErrorIs(t, err, ErrUnsafeMemberRemoval)
			require.Contains(t, err.Error(), tt.refuse)
			require.Empty(t, fc.calls("EtcdRemoveMemberByID"))
		})
	}

	fc, d, tc := newFake(t, threeControlPlanes()...)
	c := connect(t, d, tc)
	r, err := c.MemberRemovalFor(context.Background(), "w-1")
	require.NoError(t, err)
	require.Nil(t, r, "a worker has no etcd member")
	require.Empty(t, fc.calls("EtcdRemoveMemberByID"))
}

// A node that never rejoins is reported after the bound with the command
// to rerun.
func TestOSDiskRejoinWaitIsBounded(t *testing.T) {
	fc, d, tc := newFake(t, threeControlPlanes()...)
	c := connect(t, d, tc)
	var out strings.Builder
	r, err := c.MemberRemovalFor(context.Background(), "cp-2")
	require.NoError(t, err)
	require.NoError(t, c.Remove(context.Background(), r, &out))
	err = c.WaitRejoined(context.Background(), r, 150*time.Millisecond, testOptions(&out))
	require.Error(t, err)
	require.Contains(t, err.Error(), "did not rejoin etcd")
	require.False(t, errors.Is(err, ErrUnsafeMemberRemoval))
	require.True(t, slices.Contains(fc.calls("EtcdRemoveMemberByID"), "cp-1 EtcdRemoveMemberByID 101"))
}
