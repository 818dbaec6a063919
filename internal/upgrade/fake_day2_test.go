package upgrade

import (
	"context"
	"github.com/milner/milner/components/vocab"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The fake's day-2 calls, with machined's semantics (talos v1.11.5
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go):
// Shutdown answers at once with an actor id and runs the shutdown in the
// background; EtcdRemoveMemberByID is for control planes only
// (checkControlplane: Unimplemented) and answers NotFound for an id that is
// not a member (rpctypes.ErrMemberNotFound).

func (n *fakeNode) Shutdown(_ context.Context, req *machine.ShutdownRequest) (*machine.ShutdownResponse, error) {
	n.fc.mu.Lock()
	defer n.fc.mu.Unlock()
	n.fc.log("%s Shutdown force=%t", n.name, req.GetForce())
	n.shutDown = true
	return &machine.ShutdownResponse{Messages: []*machine.Shutdown{{ActorId: "actor"}}}, nil
}

func (n *fakeNode) EtcdRemoveMemberByID(_ context.Context, req *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	n.fc.mu.Lock()
	defer n.fc.mu.Unlock()
	n.fc.log("%s EtcdRemoveMemberByID %x", n.name, req.GetMemberId())
	if n.role != vocab.RoleControlPlane {
		return nil, status.Error(codes.Unimplemented, "etcd remove member is only available on control plane nodes")
	}
	for _, o := range n.fc.nodes {
		if o.memberID != 0 && o.memberID == req.GetMemberId() {
			o.memberID = 0
			return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{}}}, nil
		}
	}
	return nil, status.Error(codes.NotFound, "etcdserver: member not found")
}

// calls returns the journal entries of one call kind ("Shutdown", ...).
func (fc *fakeCluster) calls(kind string) []string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var out []string
	for _, e := range fc.journal {
		if strings.Contains(e, " "+kind+" ") || strings.HasSuffix(e, " "+kind) {
			out = append(out, e)
		}
	}
	return out
}

// A control plane added to the running cluster is waited for until its
// etcd member is promoted: the wait lasts while it is a learner, and ends
// with an error naming the node when it never is.
func TestWaitVoterOutlastsTheLearner(t *testing.T) {
	fc, d, tc := newFake(t, fakeSpec{"cp-1", "controlplane", toTalos, k8sVer}, fakeSpec{"cp-2", "controlplane", toTalos, k8sVer})
	c := connect(t, d, tc)
	var out strings.Builder
	fc.mu.Lock()
	fc.node("cp-2").learner = true
	fc.mu.Unlock()
	promoted := time.Now().Add(200 * time.Millisecond)
	time.AfterFunc(200*time.Millisecond, func() {
		fc.mu.Lock()
		fc.node("cp-2").learner = false
		fc.mu.Unlock()
	})
	require.NoError(t, c.WaitVoter(context.Background(), "cp-2", 2*time.Second, testOptions(&out)))
	require.False(t, time.Now().Before(promoted), "the wait ended before the promotion")

	fc.mu.Lock()
	fc.node("cp-2").learner = true
	fc.mu.Unlock()
	err := c.WaitVoter(context.Background(), "cp-2", 100*time.Millisecond, testOptions(&out))
	require.ErrorContains(t, err, `node "cp-2": not a voting etcd member`)
	require.ErrorContains(t, err, "a learner, not promoted yet")
}
