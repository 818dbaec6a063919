package upgrade

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A version bump declared in the stack: one node still on the old Talos,
// one control plane still on the old Kubernetes, one node dead.
func TestUpRefusesTalosChangesWhileNodesLag(t *testing.T) {
	fc, d, tc := newFake(t,
		fakeSpec{"cp-1", "controlplane", toTalos, k8sVer},
		fakeSpec{"cp-2", "controlplane", toTalos, "v1.34.0"},
		fakeSpec{"w-1", "worker", fromTalos, k8sVer},
	)
	d.Nodes = append(d.Nodes, Node{Name: "w-9", Role: "worker", Endpoint: "127.0.0.1:1"})
	rows, err := Inventory(context.Background(), connect(t, d, tc))
	require.NoError(t, err)

	assert.Equal(t, []string{
		`node "cp-2" runs kubelet v1.34.0 (declared v1.34.1), kube-apiserver v1.34.0 (declared v1.34.1)`,
		`node "w-1" runs Talos v1.11.4 (declared v1.11.5)`,
	}, Lagging(d, rows), "the dead node w-9 is not lagging: what it runs is unknown")

	err = CheckUp(d, rows, true)
	require.ErrorIs(t, err, ErrVersionsLag)
	assert.ErrorContains(t, err, `node "w-1" runs Talos v1.11.4`)
	assert.ErrorContains(t, err, "run `milner upgrade` first")
	assert.NoError(t, CheckUp(d, rows, false), "an up that changes no Talos config moves no version")
	assert.Empty(t, fc.upgrades(), "the check only reads")

	// After the upgrade every reachable node runs the declared versions.
	_, d2, tc2 := newFake(t,
		fakeSpec{"cp-1", "controlplane", toTalos, k8sVer},
		fakeSpec{"cp-2", "controlplane", toTalos, k8sVer},
		fakeSpec{"w-1", "worker", toTalos, k8sVer},
	)
	rows, err = Inventory(context.Background(), connect(t, d2, tc2))
	require.NoError(t, err)
	assert.Empty(t, Lagging(d2, rows))
	assert.NoError(t, CheckUp(d2, rows, true))
}
