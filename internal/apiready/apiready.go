// Package apiready waits, after a control plane's Talos apply and before
// the next control plane's (after the last one's, before the apps layer),
// for its kube-apiserver to run its new config and serve.
//
// Talos applies a .cluster change (API server flags, OIDC) live, and the
// provider's apply returns before anything restarts: Talos renders the
// node's APIServerConfig resource, then the kube-apiserver static pod,
// which the kubelet reads from Talos' static-pod server at its next poll
// (every 20 s: the kubelet's default httpCheckFrequency, which Talos does
// not set, internal/app/machined/pkg/controllers/k8s/kubelet_spec.go).
// Until then the old API server answers Ready. So /readyz alone passes
// before the restart it is meant to wait for, and the next control plane
// would restart its own at the same time.
//
// The wait is therefore the one `talosctl upgrade-k8s` makes after a
// config patch (talos v1.13.9 pkg/cluster/kubernetes/talos_managed.go,
// upgradeStaticPodOnNode and checkPodStatus): the node's kube-apiserver
// mirror pod (kube-system, k8s-app=kube-apiserver, on the node's address)
// carries the talos.dev/config-version of the node's current
// APIServerConfig resource and is Ready. It asks the node's own API server
// (its address on port 6443, not the VIP, which another node may answer)
// with the cluster's admin identity, so an answer also says that API
// server serves.
package apiready

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Port is the kube-apiserver's port on a Talos control plane.
const Port = 6443

// Options bound the wait.
type Options struct {
	// Timeout is how long a node's API server may take to run its new
	// config: the kubelet's poll, the restart and readiness.
	Timeout time.Duration
	// Poll is the time between two asks.
	Poll time.Duration
	// Out, when set, gets one line when the wait starts and one when it ends.
	Out io.Writer
}

// Defaults are the waits milner up uses: the kubelet's 20 s poll, the
// restart, and a slow image pull fit in five minutes (upgrade-k8s'
// checkPodStatus allows the same).
var Defaults = Options{Timeout: 5 * time.Minute, Poll: 2 * time.Second}

// Node is the control plane waited for.
type Node struct {
	// Name is the node's name (Kubernetes' and Talos').
	Name string
	// API is the node's own API server: its address, on Port.
	API netip.AddrPort
	// ConfigVersion returns the version of the node's APIServerConfig
	// resource: the talos.dev/config-version its static pod carries
	// (TalosConfigVersion asks the node).
	ConfigVersion func(context.Context) (string, error)
}

// TalosConfigVersion asks the Talos API at endpoint, with talosconfig's
// identity, for the version of the node's APIServerConfig resource.
func TalosConfigVersion(tc *clientconfig.Config, endpoint string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(endpoint))
		if err != nil {
			return "", err
		}
		defer func() { _ = c.Close() }()
		r, err := safe.StateGetByID[*k8s.APIServerConfig](ctx, c.COSI, k8s.APIServerConfigID)
		if err != nil {
			return "", err
		}
		return r.Metadata().Version().String(), nil
	}
}

// Wait returns once n's kube-apiserver mirror pod, as n's own API server
// lists it, carries n's current APIServerConfig version and is Ready,
// asking every opts.Poll; or an error naming the node and the last answer
// after opts.Timeout (or when ctx ends). kubeconfig is the cluster's: its
// CA and client identity are used, its server name is kept for the TLS
// check (the API server's certificate names the cluster endpoint), and
// only the address dialled is the node's.
func Wait(ctx context.Context, kubeconfig []byte, n Node, opts Options) error {
	kube, err := clientFor(kubeconfig, n.API)
	if err != nil {
		return fmt.Errorf("node %s: API server readiness: %w", n.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if opts.Out != nil {
		_, _ = fmt.Fprintf(opts.Out, "milner: waiting for %s's API server (%s) to run its new config before Milner goes on (up to %s)\n", n.Name, n.API, opts.Timeout)
	}
	start := time.Now()
	last := "no answer"
	for {
		answer, done := ask(ctx, kube, n)
		if done {
			if opts.Out != nil {
				_, _ = fmt.Fprintf(opts.Out, "milner: %s's API server runs config version %s and is Ready (after %s)\n", n.Name, answer, time.Since(start).Round(time.Second))
			}
			return nil
		}
		if ctx.Err() == nil {
			last = answer // an ask the deadline cut short keeps the answer before it
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: its API server at %s did not run its new config within %s (last answer: %s); the next control plane's config was not applied", n.Name, n.API, opts.Timeout, last)
		case <-time.After(opts.Poll):
		}
	}
}

// clientFor is a Kubernetes client of the node's own API server, with the
// kubeconfig's TLS and credentials.
func clientFor(kubeconfig []byte, address netip.AddrPort) (kubernetes.Interface, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	server, err := url.Parse(cfg.Host)
	if err != nil || server.Hostname() == "" {
		return nil, fmt.Errorf("kubeconfig: server %q is not a URL", cfg.Host)
	}
	if cfg.ServerName == "" {
		cfg.ServerName = server.Hostname()
	}
	cfg.Host = "https://" + address.String()
	cfg.Timeout = 5 * time.Second
	cfg.QPS = -1 // one ask per Poll: client-go's limiter would only turn a late ask into its own error
	return kubernetes.NewForConfig(cfg)
}

// ask is one round: the node's config version (the answer when done), or
// in a few words why it is not done yet.
func ask(ctx context.Context, kube kubernetes.Interface, n Node) (string, bool) {
	want, err := n.ConfigVersion(ctx)
	if err != nil {
		return "Talos API: " + err.Error(), false
	}
	pods, err := kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-apiserver"})
	if err != nil {
		return "API server: " + err.Error(), false
	}
	for _, p := range pods.Items {
		if p.Status.HostIP != n.API.Addr().String() {
			continue
		}
		if got := p.Annotations[constants.AnnotationStaticPodConfigVersion]; got != want {
			return fmt.Sprintf("pod %s runs config version %q, the node's is %q", p.Name, got, want), false
		}
		if !ready(p) {
			return fmt.Sprintf("pod %s at config version %s is not Ready", p.Name, want), false
		}
		return want, true
	}
	return fmt.Sprintf("no kube-apiserver pod on %s", n.API.Addr()), false
}

func ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
