package upgrade

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/siderolabs/go-kubernetes/kubernetes/upgrade"
	"github.com/siderolabs/talos/pkg/cluster"
	k8supgrade "github.com/siderolabs/talos/pkg/cluster/kubernetes"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// KubernetesStep is the cluster's Kubernetes upgrade.
type KubernetesStep struct {
	// From is the lowest Kubernetes version a node runs.
	From string
	// To is the declared version.
	To string
	// Via is the control plane whose Talos API the upgrade is driven through.
	Via Node
	// Endpoint is the Kubernetes API URL.
	Endpoint string
}

// UpgradeKubernetes runs upstream's `talosctl upgrade-k8s` (talos v1.11.5
// pkg/cluster/kubernetes.Upgrade, the same code, not a copy): after
// checking the path and pre-pulling images it patches each control plane's
// machine config for kube-apiserver, kube-controller-manager and
// kube-scheduler, one node at a time, waiting for each static pod to come
// back on the new version; then kube-proxy; then every kubelet, node by
// node, waiting for the Node to be Ready; then syncs the bootstrap
// manifests (CoreDNS and the rest) with server-side apply. It is driven
// through one control plane's Talos API, with the Kubernetes client built
// from the kubeconfig that API hands out, as talosctl does.
func UpgradeKubernetes(ctx context.Context, c *Cluster, step KubernetesStep, out io.Writer) error {
	path, err := upgrade.NewPath(strings.TrimPrefix(step.From, "v"), strings.TrimPrefix(step.To, "v"))
	if err != nil {
		return fmt.Errorf("kubernetes %s -> %s: %w", step.From, step.To, err)
	}
	provider := &cluster.ConfigClientProvider{DefaultClient: c.clients[step.Via.Name]}
	state := struct {
		cluster.ClientProvider
		cluster.K8sProvider
	}{
		ClientProvider: provider,
		K8sProvider:    &cluster.KubernetesClient{ClientProvider: provider, ForceEndpoint: step.Endpoint},
	}
	opts := upgradeOptions(path, step, out)
	if err := k8supgrade.Upgrade(ctx, &state, opts); err != nil {
		return fmt.Errorf("kubernetes %s -> %s: %w", step.From, step.To, err)
	}
	return nil
}

// upgradeOptions are the options UpgradeKubernetes runs upstream's upgrade
// with. The images are machinery's constants, the very ones the machine
// config generator writes (machinery v1.11.5 config/generate/init.go and
// worker.go), so what upgrade-k8s patches into a node's config is what the
// bumped stack renders: `milner up` afterwards finds the images in place.
func upgradeOptions(path *upgrade.Path, step KubernetesStep, out io.Writer) k8supgrade.UpgradeOptions {
	return k8supgrade.UpgradeOptions{
		Path:                   path,
		ControlPlaneEndpoint:   step.Endpoint,
		LogOutput:              lineWriter{out},
		PrePullImages:          true,
		UpgradeKubelet:         true,
		EncoderOpt:             encoder.WithComments(encoder.CommentsDisabled),
		KubeletImage:           constants.KubeletImage,
		APIServerImage:         constants.KubernetesAPIServerImage,
		ControllerManagerImage: constants.KubernetesControllerManagerImage,
		SchedulerImage:         constants.KubernetesSchedulerImage,
		ProxyImage:             constants.KubeProxyImage,
	}
}

// lineWriter ends every log line upstream writes without a newline.
type lineWriter struct{ w io.Writer }

func (l lineWriter) Write(p []byte) (int, error) {
	if len(p) > 0 && p[len(p)-1] != '\n' {
		if _, err := l.w.Write(append(p[:len(p):len(p)], '\n')); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return l.w.Write(p)
}
