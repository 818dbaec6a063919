package upgrade

import (
	"context"
	"strings"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

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
	rows := Inventory(context.Background(), connect(t, d, tc))

	assert.Equal(t, []string{
		`node "cp-2" runs kubelet v1.34.0 (declared v1.34.1), kube-apiserver v1.34.0 (declared v1.34.1)`,
		`node "w-1" runs Talos v1.11.4 (declared v1.11.5)`,
	}, Lagging(d, rows), "the dead node w-9 is not lagging: what it runs is unknown")

	err := CheckUp(d, rows, true)
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
	rows = Inventory(context.Background(), connect(t, d2, tc2))
	assert.Empty(t, Lagging(d2, rows))
	assert.NoError(t, CheckUp(d2, rows, true))
}

// What preview, up and status --versions print: a node on an older
// version is drift; a cluster nobody answers for is one line, not an error.
func TestAskVersionsShowsDriftOrOneLine(t *testing.T) {
	_, d, tc := newFake(t,
		fakeSpec{"cp-1", "controlplane", toTalos, k8sVer},
		fakeSpec{"w-1", "worker", fromTalos, k8sVer},
	)
	cfg, err := clientconfig.Open(tc)
	require.NoError(t, err)
	v := AskVersions(context.Background(), cfg, d, 5*time.Second)
	require.Empty(t, v.Note)
	var out strings.Builder
	v.Write(&out)
	assert.Contains(t, out.String(), "w-1          worker       v1.11.4 (declared v1.11.5) *")
	assert.Regexp(t, `cp-1 +controlplane +v1\.11\.5 +v1\.34\.1 *\n`, out.String())
	assert.Contains(t, out.String(), "drift on 1 nodes: `milner upgrade` moves them")

	dead := Declared{TalosVersion: toTalos, KubernetesVersion: k8sVer, Nodes: []Node{{Name: "cp-1", Role: "controlplane", Endpoint: "127.0.0.1:1"}}}
	v = AskVersions(context.Background(), cfg, dead, 2*time.Second)
	out.Reset()
	v.Write(&out)
	assert.Equal(t, "versions: not known (no node answered); declared Talos v1.11.5, Kubernetes v1.34.1\n", out.String())
	assert.Empty(t, Lagging(dead, v.Rows))
}
