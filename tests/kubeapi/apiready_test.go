//go:build integration

package kubeapi

import (
	"context"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/milner/milner/internal/apiready"
)

// TestAPIReadyOnTheRealAPIServer (issue 34): the wait between two control
// planes asks a real kube-apiserver's /readyz at the node's own address
// while checking its certificate for the cluster endpoint's name (the
// kubeconfig's server, here kubernetes.default.svc, which the serving
// certificate holds and loopback's address alone would not be checked
// against), with the admin client identity, and returns once it is Ready.
// The same wait fails against an address no API server answers.
func TestAPIReadyOnTheRealAPIServer(t *testing.T) {
	s := startAPIServer(t)
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	node := netip.MustParseAddrPort(u.Host)
	kube := strings.Replace(s.Kubeconfig, s.URL, "https://kubernetes.default.svc:6443", 1)
	var out strings.Builder
	start := time.Now()
	if err := apiready.Wait(context.Background(), []byte(kube), "cp-1", node, apiready.Options{Timeout: 30 * time.Second, Poll: time.Second, Out: &out}); err != nil {
		t.Fatalf("the real API server is Ready, yet the wait failed: %v", err)
	}
	t.Logf("Ready after %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out.String()))

	closed := netip.AddrPortFrom(node.Addr(), uint16(freePort(t)))
	err = apiready.Wait(context.Background(), []byte(kube), "cp-2", closed, apiready.Options{Timeout: 3 * time.Second, Poll: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "node cp-2") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a node whose API server does not answer: want an error naming cp-2 and the refusal, got %v", err)
	}
}
