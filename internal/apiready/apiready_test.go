package apiready

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/milner/milner/tests/testpki"
)

// apiServer answers /readyz as kube-apiserver does: 500 with the failing
// checks while not ready, 200 "ok" once ready. readyAfter is how many
// asks fail first (-1: never ready).
func apiServer(t *testing.T, readyAfter int) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var asks atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		n := int(asks.Add(1))
		if readyAfter < 0 || n <= readyAfter {
			http.Error(w, "[-]etcd failed: reason withheld\nreadyz check failed", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv, &asks
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

// TestWaitAsksUntilReady: the wait returns only after the API server has
// answered Ready, not at its first refusal.
func TestWaitAsksUntilReady(t *testing.T) {
	srv, asks := apiServer(t, 2)
	var out strings.Builder
	opts := fast
	opts.Out = &out
	require.NoError(t, Wait(context.Background(), kubeconfigFor(t, caOf(srv)), "cp-1", netip.MustParseAddrPort(srv.Listener.Addr().String()), opts))
	assert.Equal(t, int32(3), asks.Load(), "two 500s, then the 200")
	assert.Contains(t, out.String(), "cp-1's API server is Ready")
}

// TestWaitFailsWhenNeverReady: an API server that never answers Ready
// fails the wait, naming the node and the last answer, and says the next
// control plane was not touched.
func TestWaitFailsWhenNeverReady(t *testing.T) {
	srv, _ := apiServer(t, -1)
	err := Wait(context.Background(), kubeconfigFor(t, caOf(srv)), "cp-2", netip.MustParseAddrPort(srv.Listener.Addr().String()), fast)
	require.Error(t, err)
	for _, want := range []string{"node cp-2", "500", "readyz check failed", "next control plane's config was not applied"} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestWaitChecksTheServersCertificate: an answer from a server the
// cluster's CA did not sign is never taken as Ready.
func TestWaitChecksTheServersCertificate(t *testing.T) {
	srv, asks := apiServer(t, 0)
	err := Wait(context.Background(), kubeconfigFor(t, otherCA()), "cp-1", netip.MustParseAddrPort(srv.Listener.Addr().String()), fast)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate")
	assert.Zero(t, asks.Load(), "no request reaches a server whose certificate fails")
}
