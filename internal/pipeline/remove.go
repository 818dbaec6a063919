package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/internal/clientfiles"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
)

// `milner up --remove <node>` (docs/runbooks/remove-node.md): the node is
// first taken out of milner:nodes, so the preview shows its delete, and the
// flag names it, so that no node leaves by a stray edit. A config change
// and a flag rather than a verb of its own: the stack file stays what the
// cluster is (a verb would leave it declaring a node that is gone, and the
// next up would bring it back), and the removal is one more reviewed delta
// of the one pipeline. Its Talos and Kubernetes side is internal/upgrade's
// RemoveNode; here are its rules, the state edit that retains its volumes,
// and what the run prints after.

// removing reports whether the run is `--remove <node>`.
func (o *Op) removing() bool { return o.in.Remove != "" }

// removedNode is the node --remove names as the state recorded it: its
// address (its Talos config apply's node input) and its role (the applied
// config's machine type). ok is false when the state holds no Talos config
// of it (a substrate-only stack: there is nothing to drain or leave).
func (o *Op) removedNode() (n upgrade.Node, ok bool, err error) {
	name := o.in.Remove
	apply, err := o.Find(gate.TypeConfigApply, name+"-apply")
	if err != nil || apply == nil {
		return n, false, err
	}
	outs, err := o.St.EachOutputsInClear(o.Ctx, gate.TypeConfigApply)
	if err != nil {
		return n, false, err
	}
	addr, _ := apply.Inputs["node"].(string)
	raw, _ := outs[name+"-apply"]["machineConfiguration"].(string)
	cfg, err := configloader.NewFromBytes([]byte(raw))
	if err != nil {
		return n, false, fmt.Errorf("node %q: its applied Talos config in state: %w", name, err)
	}
	return upgrade.Node{Name: name, Role: vocab.Role(cfg.Machine().Type().String()), Endpoint: addr}, true, nil
}

// removeNode refuses a --remove that does not name a node the state holds
// and the config no longer declares, or that comes with --replace; for a
// control plane it asks the others whether etcd keeps its quorum without
// it (upgrade.MemberRemovalFor) and refuses otherwise. The removal is kept
// for the apply.
func removeNode(o *Op) ([]gate.Refusal, error) {
	if !o.removing() {
		return nil, nil
	}
	name := o.in.Remove
	switch {
	case len(o.in.Replace) > 0:
		return nil, Refused("--remove %s with --replace: a removal runs alone; nothing was changed", name)
	case slices.ContainsFunc(o.cfg.Nodes, func(n config.NodeConfig) bool { return n.Name == name }):
		return nil, Refused("--remove %s: milner:nodes still declares %s; take it out of the stack config first, so that the preview shows its delete; nothing was changed", name, name)
	}
	vm, err := o.nodeVM(name)
	if err != nil {
		return nil, err
	}
	if vm == nil {
		return nil, Refused("--remove %s: the state of stack %q has no VM of node %s; nothing was changed", name, o.St.Name(), name)
	}
	c, err := o.talosCluster()
	if err != nil {
		return nil, Refused("--remove %s: the Talos API is needed to take the node out of the cluster: %v; nothing was changed", name, err)
	}
	if c == nil || o.obs.removed == nil {
		return nil, nil // no Talos config in state: nothing to drain or leave
	}
	o.obs.nodeRemoval, err = c.RemovalFor(o.Ctx, *o.obs.removed)
	if errors.Is(err, upgrade.ErrUnsafeMemberRemoval) {
		return nil, Refused("--remove %s: %v; nothing was changed", name, err)
	}
	return nil, err
}

// removeNamed refuses, before anything is previewed, a state that holds
// the VM of a node milner:nodes no longer declares, unless --remove names
// it. A node leaves the cluster only drained, out of etcd and shut down;
// a node that merely vanished from the config would lose its VM without
// any of that, and the engine's own preview fails on its protected
// volumes ("cannot be deleted because it is protected") without saying
// how a node is removed.
func removeNamed(o *Op) ([]gate.Refusal, error) {
	res, err := o.Resources()
	if err != nil {
		return nil, err
	}
	gone := undeclared(o.cfg, res, o.in.Remove)
	if len(gone) == 0 {
		return nil, nil
	}
	return nil, Refused("the state of stack %q holds the VM of %s, which milner:nodes no longer declares; to take a node out of the cluster (drained, out of etcd, shut down, its volumes kept): `milner up --stack %s --remove %s`, one node per run; otherwise restore it in milner:nodes; nothing was changed",
		o.St.Name(), strings.Join(gone, ", "), o.St.Name(), gone[0])
}

// undeclared are the nodes whose VM the state holds and the config does
// not declare, but for removed, in state order.
func undeclared(cfg *config.Config, res []engine.Resource, removed string) []string {
	var out []string
	for _, r := range res {
		if !gate.IsNodeVM(r.Type) || gate.LayerOf(r.Type, r.Name()) != gate.Disposable {
			continue // a Proxmox disk holder shares the node VMs' type
		}
		node, ok := strings.CutPrefix(r.Name(), cfg.Cluster.Name+"-")
		if ok && node != removed && !slices.ContainsFunc(cfg.Nodes, func(n config.NodeConfig) bool { return n.Name == node }) {
			out = append(out, node)
		}
	}
	return out
}

// retainRemoved marks the removed node's persistent substrate in state
// (its volumes, or its Proxmox disk holder) unprotected and retained on
// delete, for the preview to plan their delete as a drop from state that
// leaves them on the host; closeObservations puts their protection back
// unless the run applied. Their URNs pass the lifecycle hooks.
func (o *Op) retainRemoved() ([]string, error) {
	if !o.removing() {
		return nil, nil
	}
	var urns []resource.URN
	for _, name := range vocab.NodePersistent(o.cfg.Cluster.Name, o.in.Remove) {
		res, err := o.Resources()
		if err != nil {
			return nil, err
		}
		for _, r := range res {
			if r.Name() == name && gate.LayerOf(r.Type, name) == gate.Persistent {
				o.obs.retained = append(o.obs.retained, r)
				urns = append(urns, r.URN)
			}
		}
	}
	if err := o.St.Retain(o.Ctx, urns); err != nil {
		return nil, err
	}
	out := make([]string, len(urns))
	for i, u := range urns {
		out[i] = string(u)
	}
	return out, nil
}

// keepRetained puts back the protection of the removed node's persistent
// substrate when the run did not apply (a preview, a refusal, a declined
// confirmation, a failed drain); also after an interrupt.
func (o *Op) keepRetained() {
	if len(o.obs.retained) == 0 || o.obs.removedApplied {
		return
	}
	var urns []resource.URN
	for _, r := range o.obs.retained {
		urns = append(urns, r.URN)
	}
	if err := o.St.Keep(context.WithoutCancel(context.Background()), urns); err != nil {
		fmt.Fprintf(os.Stderr, "milner: could not protect %s's volumes again: %v; run `pulumi state protect` on each\n", o.in.Remove, err)
	}
	o.obs.retained = nil
}

// takeOut runs, once the delta is confirmed and before the engine applies
// it, the removed node's drain, etcd member removal, Shutdown and the
// delete of its Kubernetes node (upgrade.RemoveNode).
func (o *Op) takeOut() error {
	r := o.obs.nodeRemoval
	if r == nil {
		return nil
	}
	c, err := o.talosCluster()
	if err != nil || c == nil {
		return err
	}
	outs, err := o.Outputs()
	if err != nil {
		return err
	}
	raw, _ := outs[clientfiles.Kube.Output].(string)
	if raw == "" {
		return fmt.Errorf("stack %q has no kubeconfig output: draining %s needs it; nothing was changed", o.St.Name(), r.Node.Name)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig([]byte(raw))
	if err != nil {
		return fmt.Errorf("stack %q: kubeconfig: %w", o.St.Name(), err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("stack %q: kubeconfig: %w", o.St.Name(), err)
	}
	opts := upgrade.DefaultOptions(o.Out)
	opts.DrainTimeout = o.in.DrainTimeout
	return c.RemoveNode(o.Ctx, r, kube, o.vmStopped, stopTimeout, opts)
}

// afterRemove lists what the removal left on the host: the node's
// retained volumes (or disk holder), each with the command that deletes
// it, which is the second, named confirmation their delete takes.
func afterRemove(o *Op) error {
	if len(o.obs.retained) == 0 {
		return nil
	}
	_, _ = fmt.Fprintf(o.Out, "milner up: %s removed; kept on the host, no longer in state (delete each only once you are sure):\n", o.in.Remove)
	for _, r := range o.obs.retained {
		_, _ = fmt.Fprintf(o.Out, "  %s  %s\n", r.Name(), o.deleteCommand(r))
	}
	_, _ = fmt.Fprintf(o.Out, "re-adding %s refuses while they exist (the orphan guard names them): adopt them or delete them first (docs/runbooks/remove-node.md)\n", o.in.Remove)
	return nil
}

// deleteCommand is the command that deletes a retained object from its
// substrate.
func (o *Op) deleteCommand(r engine.Resource) string {
	if r.Type == gate.TypeProxmoxVM {
		host, _ := r.Inputs["nodeName"].(string)
		// A holder carries PVE's protection flag (teardown.go), which a
		// delete refuses.
		return fmt.Sprintf("pvesh set /nodes/%[1]s/qemu/%[2]s --protection 0 && pvesh delete /nodes/%[1]s/qemu/%[2]s --destroy-unreferenced-disks 1 --purge 1", host, r.ID)
	}
	return fmt.Sprintf("virsh -c %s vol-delete %s", o.cfg.Substrate.Libvirt.URI, r.ID)
}
