package apiready

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/milner/milner/tests/talosapi"
	"github.com/milner/milner/tests/testpki"
)

// apiServer lists the kube-apiserver mirror pods as kube-apiserver does;
// pod says, on each list, what the node's pod is (nil: none).
func apiServer(t *testing.T, pod func() *corev1.Pod) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var asks atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/kube-system/pods" || r.URL.Query().Get("labelSelector") != "k8s-app=kube-apiserver" {
			http.NotFound(w, r)
			return
		}
		asks.Add(1)
		list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
		if p := pod(); p != nil {
			list.Items = append(list.Items, *p)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(list)
	}))
	t.Cleanup(srv.Close)
	return srv, &asks
}

// mirrorPod is the node's kube-apiserver mirror pod at a config version.
func mirrorPod(hostIP, version string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-cp-1", Namespace: "kube-system", Annotations: map[string]string{constants.AnnotationStaticPodConfigVersion: version}},
		Status:     corev1.PodStatus{HostIP: hostIP, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// kubeconfigFor is a kubeconfig naming the cluster endpoint
// https://example.com:6443 (a name httptest's certificate holds) with the
// CA given.
func kubeconfigFor(t *testing.T, ca []byte) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://example.com:6443", CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["admin@c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "admin"}
	cfg.CurrentContext = "admin@c"
	b, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	return b
}

func caOf(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// otherCA is a CA certificate of its own (every httptest server shares
// one certificate, so a second server would not do).
func otherCA() []byte {
	return []byte(testpki.Valid("example.com").CA)
}

var fast = Options{Timeout: 2 * time.Second, Poll: 10 * time.Millisecond}

func nodeAt(srv *httptest.Server, version func() string) Node {
	return Node{Name: "cp-1", API: netip.MustParseAddrPort(srv.Listener.Addr().String()), ConfigVersion: func(context.Context) (string, error) { return version(), nil }}
}

// TestWaitOutlastsTheOldAPIServer: right after a live apply the old API
// server still serves, Ready, at the old config version; the wait returns
// only once the pod at the node's new version is Ready (the kubelet's
// next poll and the restart), not at the first answer.
func TestWaitOutlastsTheOldAPIServer(t *testing.T) {
	var asks atomic.Int32
	srv, _ := apiServer(t, func() *corev1.Pod {
		switch n := asks.Add(1); {
		case n <= 3:
			return mirrorPod("127.0.0.1", "4", true) // the old API server, Ready
		case n <= 5:
			return mirrorPod("127.0.0.1", "5", false) // restarted, not Ready yet
		default:
			return mirrorPod("127.0.0.1", "5", true)
		}
	})
	var out strings.Builder
	opts := fast
	opts.Out = &out
	require.NoError(t, Wait(context.Background(), kubeconfigFor(t, caOf(srv)), nodeAt(srv, func() string { return "5" }), opts))
	assert.Equal(t, int32(6), asks.Load(), "three answers at the old version, two not Ready, then Ready")
	assert.Contains(t, out.String(), "cp-1's API server runs config version 5 and is Ready")
}

// TestWaitFailsWhenNeverRestarted: a pod that never reaches the node's
// config version fails the wait, naming the node and the last answer,
// and says the next control plane was not touched; so does a node with no
// API server pod, or on another host.
func TestWaitFailsWhenNeverRestarted(t *testing.T) {
	for want, pod := range map[string]*corev1.Pod{
		`pod kube-apiserver-cp-1 runs config version "4", the node's is "5"`: mirrorPod("127.0.0.1", "4", true),
		"no kube-apiserver pod on 127.0.0.1":                                 mirrorPod("10.0.0.9", "5", true),
	} {
		srv, _ := apiServer(t, func() *corev1.Pod { return pod })
		err := Wait(context.Background(), kubeconfigFor(t, caOf(srv)), nodeAt(srv, func() string { return "5" }), fast)
		require.Error(t, err)
		for _, w := range []string{"node cp-1", want, "next control plane's config was not applied"} {
			assert.Contains(t, err.Error(), w)
		}
	}
}

// TestWaitChecksTheServersCertificate: an answer from a server the
// cluster's CA did not sign is never taken.
func TestWaitChecksTheServersCertificate(t *testing.T) {
	srv, asks := apiServer(t, func() *corev1.Pod { return mirrorPod("127.0.0.1", "5", true) })
	err := Wait(context.Background(), kubeconfigFor(t, otherCA()), nodeAt(srv, func() string { return "5" }), fast)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate")
	assert.Zero(t, asks.Load(), "no request reaches a server whose certificate fails")
}

// TestTalosConfigVersionFollowsTheApply: the version asked of the Talos
// API (the double, which renders APIServerConfig from the config as
// Talos' controllers do) moves when a live .cluster change lands, and not
// when a change leaves the API server alone.
func TestTalosConfigVersionFollowsTheApply(t *testing.T) {
	s, err := talosapi.NewSecrets("test", "https://127.0.0.1:1")
	require.NoError(t, err)
	cp, err := s.Config(machine.TypeControlPlane, "1.32.3")
	require.NoError(t, err)
	tc, err := s.Talosconfig()
	require.NoError(t, err)
	c := talosapi.NewCluster()
	t.Cleanup(func() { _ = c.Close() })
	n, err := c.AddNode("cp-1", netip.MustParseAddrPort("127.0.0.1:0"), talosapi.WithPlatformConfig(cp))
	require.NoError(t, err)
	version := TalosConfigVersion(tc, n.Endpoint())
	ctx := context.Background()
	var before string
	require.Eventually(t, func() bool { before, err = version(ctx); return err == nil }, 10*time.Second, 20*time.Millisecond, "the node never answered: %v", err)

	apply := func(patch string) {
		t.Helper()
		cl, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(n.Endpoint()))
		require.NoError(t, err)
		defer func() { _ = cl.Close() }()
		patches, err := configpatcher.LoadPatches([]string{patch})
		require.NoError(t, err)
		out, err := configpatcher.Apply(configpatcher.WithBytes(cp), patches)
		require.NoError(t, err)
		data, err := out.Bytes()
		require.NoError(t, err)
		_, err = cl.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: data, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT})
		require.NoError(t, err)
	}
	apply("machine:\n  nodeLabels:\n    a: b\n")
	same, err := version(ctx)
	require.NoError(t, err)
	assert.Equal(t, before, same, "a node label does not touch the API server's config")
	apply("cluster:\n  apiServer:\n    extraArgs:\n      oidc-issuer-url: https://login.example.com\n")
	require.Eventually(t, func() bool { v, err := version(ctx); return err == nil && v != before }, 10*time.Second, 20*time.Millisecond, "the API server's config version did not move")
}
