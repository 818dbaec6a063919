package upgrade

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// sealedAfter is the apps gate production runs (Apps, on client-go's fake
// clientset) over a Vault StatefulSet that behaves as on the Talos double:
// once node has rebooted (from the start when node is ""), its pod vault-1
// runs sealed, not Ready, for polls checks (forever when polls < 0).
func sealedAfter(fc *fakeCluster, node string, polls int) *Apps {
	vault := map[string]string{"app.kubernetes.io/name": "vault", "component": "server"}
	sealed := func() bool {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		fc.log("apps gate")
		booted := node == ""
		for _, e := range fc.journal {
			booted = booted || strings.HasPrefix(e, node+" booted ")
		}
		if !booted || polls == 0 {
			return false
		}
		polls--
		return true
	}
	client := fake.NewClientset(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vault", Name: "vault-1", Labels: vault},
		Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "vault", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	})
	client.PrependReactor("list", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		ready := int32(3)
		if sealed() {
			ready = 2
		}
		return true, &appsv1.StatefulSetList{Items: []appsv1.StatefulSet{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "vault", Name: "vault"},
			Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(int32(3)), Selector: &metav1.LabelSelector{MatchLabels: vault}},
			Status:     appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: ready},
		}}}, nil
	})
	return &Apps{client: client, namespaces: []string{"vault"}}
}

func TestAppsGateStopsBeforeTheNextNode(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	o := testOptions(&strings.Builder{})
	o.AppsTimeout = 300 * time.Millisecond
	o.Apps = sealedAfter(fc, "cp-1", -1)

	err := Execute(context.Background(), connect(t, d, tc), o, false, yes)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "cp-1", stop.Node)
	assert.Equal(t, "apps after", stop.Stage)
	assert.ErrorContains(t, err, "vault-1 is sealed: run `milner vault unseal`")
	assert.Equal(t, []string{"cp-1"}, stop.Upgraded)
	assert.Equal(t, []string{"cp-2", "cp-3", "w-1", "w-2"}, stop.Untouched)
	assert.False(t, stop.NothingChanged())
	assert.Len(t, fc.upgrades(), 1, "a node was upgraded while Vault was sealed")
}

func TestAppsGateWaitsForTheApps(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	o := testOptions(&strings.Builder{})
	o.AppsTimeout = 300 * time.Millisecond
	o.Apps = sealedAfter(fc, "cp-2", 3) // unsealed after three polls
	require.NoError(t, Execute(context.Background(), connect(t, d, tc), o, false, yes))
	assert.Len(t, fc.upgrades(), 5)

	// Between every two Upgrade calls the gate was asked.
	fc.mu.Lock()
	defer fc.mu.Unlock()
	asked := true
	for _, e := range fc.journal {
		switch {
		case e == "apps gate":
			asked = true
		case strings.Contains(e, " Upgrade "):
			assert.True(t, asked, "no apps gate before %q", e)
			asked = false
		}
	}
}

func TestAppsNotReadyBeforeTheFirstNodeTouchesNothing(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	o := testOptions(&strings.Builder{})
	o.AppsTimeout = 300 * time.Millisecond
	o.Apps = sealedAfter(fc, "", -1)

	err := Execute(context.Background(), connect(t, d, tc), o, false, yes)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "apps before", stop.Stage)
	assert.ErrorContains(t, err, "vault-1 is sealed")
	assert.True(t, stop.NothingChanged())
	assert.Empty(t, fc.upgrades())
}
