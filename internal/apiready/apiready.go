// Package apiready waits for one control plane's kube-apiserver to answer
// Ready, between two control planes' Talos applies.
//
// Talos applies a .cluster change (API server flags, OIDC) live: the
// node's kube-apiserver static pod restarts as the config lands, and the
// provider's apply returns before the new API server serves. Without a
// wait, the next control plane's apply would restart its API server while
// the first is still down. The wait asks the node's own API server (its
// address on port 6443, not the VIP, which another node may answer) for
// /readyz, the endpoint Kubernetes documents for "ready to serve"
// (kubernetes.io/docs/reference/using-api/health-checks), with the
// cluster's admin client identity.
package apiready

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Port is the kube-apiserver's port on a Talos control plane.
const Port = 6443

// Options bound the wait.
type Options struct {
	// Timeout is how long a node's API server may take to answer Ready.
	Timeout time.Duration
	// Poll is the time between two asks.
	Poll time.Duration
	// Out, when set, gets one line when the wait starts and one when it ends.
	Out io.Writer
}

// Defaults are the waits milner up uses: an API server restart takes
// seconds; five minutes covers a slow image pull.
var Defaults = Options{Timeout: 5 * time.Minute, Poll: 2 * time.Second}

// Wait returns once the API server at address (the node's, on Port) answers GET /readyz with 200,
// asking every opts.Poll, or an error naming the node and the last answer
// after opts.Timeout (or when ctx ends). kubeconfig is the cluster's: its
// CA and client identity are used, its server name is kept for the TLS
// check (the API server's certificate names the cluster endpoint), and
// only the address dialled is the node's.
func Wait(ctx context.Context, kubeconfig []byte, node string, address netip.AddrPort, opts Options) error {
	client, target, err := clientFor(kubeconfig, address)
	if err != nil {
		return fmt.Errorf("node %s: API server readiness: %w", node, err)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if opts.Out != nil {
		_, _ = fmt.Fprintf(opts.Out, "milner: waiting for %s's API server (%s) to be Ready before the next control plane (up to %s)\n", node, target, opts.Timeout)
	}
	start := time.Now()
	last := "no answer"
	for {
		answer, ready := ask(ctx, client, target)
		if ready {
			if opts.Out != nil {
				_, _ = fmt.Fprintf(opts.Out, "milner: %s's API server is Ready (after %s)\n", node, time.Since(start).Round(time.Second))
			}
			return nil
		}
		if answer != "" {
			last = answer // an ask the deadline cut short keeps the answer before it
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: the API server at %s was not Ready within %s (last answer: %s); the next control plane's config was not applied", node, target, opts.Timeout, last)
		case <-time.After(opts.Poll):
		}
	}
}

// clientFor is an HTTP client with the kubeconfig's TLS and credentials,
// and the node's /readyz URL.
func clientFor(kubeconfig []byte, address netip.AddrPort) (*http.Client, string, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	server, err := url.Parse(cfg.Host)
	if err != nil || server.Hostname() == "" {
		return nil, "", fmt.Errorf("kubeconfig: server %q is not a URL", cfg.Host)
	}
	if cfg.ServerName == "" {
		cfg.ServerName = server.Hostname()
	}
	cfg.Host = "https://" + address.String()
	cfg.Timeout = 5 * time.Second
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	return client, cfg.Host + "/readyz", nil
}

// ask is one GET of target: its answer in a few words, and whether it is 200.
func ask(ctx context.Context, client *http.Client, target string) (string, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err.Error(), false
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", false // the wait's own deadline, not the server's answer
		}
		return err.Error(), false
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Sprintf("%s %s", resp.Status, strings.TrimSpace(string(body))), resp.StatusCode == http.StatusOK
}
