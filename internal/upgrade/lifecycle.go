package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/siderolabs/talos/cmd/talosctl/pkg/talos/kubeclient"
	"github.com/siderolabs/talos/cmd/talosctl/pkg/talos/nodedrain"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/reporter"
	"golang.org/x/mod/semver"
	"k8s.io/client-go/kubernetes"
)

// Talos v1.13 upgrades through LifecycleService (api/machine/lifecycle.proto,
// new in v1.13.0; MachineService.Upgrade is deprecated and removed in
// v1.18). `talosctl upgrade` v1.13.9 (cmd/talosctl/cmd/talos/upgrade.go,
// upgradeViaLifecycleService) uses it on nodes in the version range
// ">1.13.0-alpha.2 <2.0.0" and falls back to MachineService.Upgrade below:
// pull the installer (ImageService.Pull), install it
// (LifecycleService.Upgrade streams progress and ends with an exit code; it
// does not reboot), cordon and drain the node from the client
// (cmd/talosctl/pkg/talos/nodedrain: kubectl's drain, PodDisruptionBudgets
// honoured, 5 minutes; Milner's Drain, which also names a refused
// eviction's cause), reboot it (MachineService.Reboot), and uncordon it
// once its Node is Ready. The containerd instance is talosctl's default
// ("system": the CRI driver, the system namespace).

// lifecycleSince is the first Talos version whose nodes talosctl upgrades
// through LifecycleService.
const lifecycleSince = "v1.13.0"

// lifecycleAPI reports a node version upgraded through LifecycleService.
func lifecycleAPI(running string) bool { return semver.Compare(running, lifecycleSince) >= 0 }

// installerContainerd is talosctl upgrade's default containerd instance.
var installerContainerd = &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}

// upgradeLifecycle pulls and installs image on a v1.13+ node, drains it
// and asks it to reboot; the stage names what failed. The node is
// uncordoned by uncordonLifecycle after it came back.
func (c *Cluster) upgradeLifecycle(ctx context.Context, n Node, image string, o Options, what string) (string, error) {
	cl := c.clients[n.Name]
	if err := pullImage(ctx, cl, image); err != nil {
		return "upgrade", fmt.Errorf("pull %s: %w", image, err)
	}
	if err := installImage(ctx, cl, image); err != nil {
		return "upgrade", err
	}
	_, _ = fmt.Fprintf(o.Out, "%s: installed %s; cordon and drain\n", what, image)
	if err := c.drain(ctx, n, o); err != nil {
		return "drain", fmt.Errorf("%w (the new Talos is installed and runs at the next reboot; the node is cordoned: fix the cause and rerun `milner upgrade`)", err)
	}
	if err := cl.Reboot(ctx, client.WithRebootMode(machine.RebootRequest_DEFAULT)); err != nil {
		return "reboot", err
	}
	return "", nil
}

// kube is the Kubernetes API node n's drain and uncordon go through, and
// its name there, as talosctl's drain reaches them (talos
// v1.13.9 cmd/talosctl/cmd/talos/drain.go): the node's name from its own
// nodename resource, and the cluster's admin kubeconfig from a control
// plane (a worker answers Kubeconfig Unimplemented), the first that
// answers.
func (c *Cluster) kube(ctx context.Context, n Node) (kubernetes.Interface, string, error) {
	nodeName, err := nodedrain.GetKubernetesNodeName(ctx, c.clients[n.Name])
	if err != nil {
		return nil, "", err
	}
	if c.kubernetes != nil {
		return c.kubernetes, nodeName, nil
	}
	var errs []error
	for _, cp := range c.declared.controlPlanes() {
		cs, err := kubeclient.FromTalosClient(ctx, c.clients[cp.Name])
		if err == nil {
			return cs, nodeName, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", cp.Name, err))
	}
	return nil, "", errors.Join(errs...)
}

// drain cordons and drains node n's Kubernetes node (Drain).
func (c *Cluster) drain(ctx context.Context, n Node, o Options) error {
	cs, nodeName, err := c.kube(ctx, n)
	if err != nil {
		return err
	}
	return Drain(ctx, cs, nodeName, o.DrainTimeout, o.Out)
}

// uncordon waits for an upgraded node to be Ready and uncordons it, as
// talosctl does after a LifecycleService upgrade's reboot.
func (c *Cluster) uncordon(ctx context.Context, n Node, o Options, what string) error {
	cs, nodeName, err := c.kube(ctx, n)
	if err != nil {
		return err
	}
	if err := nodedrain.WaitForNodeReady(ctx, cs, nodeName, o.HealthTimeout); err != nil {
		return fmt.Errorf("node %q in Kubernetes: %w", nodeName, err)
	}
	return nodedrain.Uncordon(ctx, cs, nodeName, report(o.Out, what))
}

// report writes nodedrain's progress as lines.
func report(w io.Writer, what string) nodedrain.ReportFunc {
	return func(u reporter.Update) { _, _ = fmt.Fprintf(w, "%s: %s\n", what, u.Message) }
}

// pullImage pulls image into the installer's containerd instance
// (ImageService.Pull streams progress, then the image's name).
func pullImage(ctx context.Context, cl *client.Client, image string) error {
	stream, err := cl.ImageClient.Pull(ctx, &machine.ImageServicePullRequest{Containerd: installerContainerd, ImageRef: image})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		switch {
		case errors.Is(err, io.EOF):
			return errors.New("the pull ended without naming the image")
		case err != nil:
			return err
		case resp.GetName() != "":
			return nil
		}
	}
}

// installImage runs LifecycleService.Upgrade to its exit code.
func installImage(ctx context.Context, cl *client.Client, image string) error {
	stream, err := cl.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{
		Containerd: installerContainerd,
		Source:     &machine.InstallArtifactsSource{ImageName: image},
	})
	if err != nil {
		return fmt.Errorf("install %s: %w", image, err)
	}
	last := ""
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("install %s: the upgrade ended without an exit code (last: %q)", image, last)
		}
		if err != nil {
			return fmt.Errorf("install %s: %w", image, err)
		}
		switch p := resp.GetProgress().GetResponse().(type) {
		case *machine.LifecycleServiceInstallProgress_Message:
			last = p.Message
		case *machine.LifecycleServiceInstallProgress_ExitCode:
			if p.ExitCode != 0 {
				return fmt.Errorf("install %s: the installer exited with %d (last: %q)", image, p.ExitCode, last)
			}
			return nil
		}
	}
}

// budgetCheck refuses to upgrade, through MachineService.Upgrade, a node
// a pod of which a PodDisruptionBudget keeps: Talos' own drain in that
// upgrade asks again for up to 5 minutes, then gives the eviction up with
// a warning in machined's log and reboots the node with the pod on it
// (talos v1.13.9 pkg/kubernetes/kubernetes.go Drain; v1.11.5 and v1.12.0
// alike), so the budget would be broken without a word to the operator.
// A v1.13 node is drained by Milner, which honours budgets (Drain). When
// the pods or budgets cannot be read, it says so and goes on: Talos' drain
// then fails on the same API and the sequence watch names that.
func (c *Cluster) budgetCheck(ctx context.Context, s Step, what string, o Options) error {
	cs, nodeName, err := c.kube(ctx, s.Node)
	var blocked []string
	if err == nil {
		blocked, err = blockedBy(ctx, cs, nodeName)
	}
	switch {
	case err != nil:
		_, _ = fmt.Fprintf(o.Out, "%s: cannot read the node's pods and disruption budgets (%v); Talos' drain meets them\n", what, err)
		return nil
	case len(blocked) > 0:
		return fmt.Errorf("%s: Talos %s's drain would evict past its budget after 5 minutes and reboot the node with the pod on it; nothing was sent: let the budget allow a disruption (its pods ready, or more replicas) and rerun `milner upgrade`",
			strings.Join(blocked, "; "), s.From)
	}
	return nil
}
