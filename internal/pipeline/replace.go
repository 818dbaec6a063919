package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/internal/applymode"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
)

// The Talos side of `milner up --replace` (docs/runbooks/replace.md and
// lost-os-disk.md): a graceful shutdown of each replaced node before the
// engine deletes its VM and, with --os-disk, the etcd member removal, the
// OS volume's protection lifted for that one replace, and the wait for the
// node to rejoin etcd. The Talos calls are internal/upgrade's.

// Bounds of the waits of a replace on a real cluster.
const (
	// stopTimeout bounds the wait for a replaced node's VM to stop after
	// Shutdown: longer than Talos' own drain timeout (5 minutes), so a
	// drain that waits on a PodDisruptionBudget ends before the VM is deleted.
	stopTimeout = 6 * time.Minute
	// rejoinTimeout bounds the wait for a node with a fresh OS disk to boot,
	// take its config in maintenance mode, install and rejoin etcd.
	rejoinTimeout = 15 * time.Minute
)

// osVolume is the logical name of a libvirt node's OS volume.
func osVolume(cfg *config.Config, node string) string {
	return cfg.Cluster.Name + "-" + node + vocab.OSSuffix
}

// osDisk reports whether the run is `up --replace <node> --os-disk`.
func (o *Op) osDisk() bool { return o.in.OSDisk && len(o.in.Replace) == 1 }

// talosCluster is the replaced nodes' Talos API, dialled once with the
// talosconfig the versions are asked with; nil for a stack whose state
// holds no Talos config yet (nothing to ask).
func (o *Op) talosCluster() (*upgrade.Cluster, error) {
	if o.obs.clusterDone {
		return o.obs.cluster, o.obs.clusterErr
	}
	o.obs.clusterDone = true
	tc, err := o.appliedTalosconfig(o.in.Talosconfig)
	if errors.Is(err, errNoTalosConfig) {
		fmt.Fprintf(os.Stderr, "milner up: %v: nothing to take out or shut down\n", err)
		return nil, nil
	}
	d := upgrade.FromConfig(o.cfg)
	if err == nil && o.removing() {
		// --remove's node, no longer declared, as the state recorded it.
		var n upgrade.Node
		var ok bool
		if n, ok, err = o.removedNode(); ok {
			o.obs.removed = &n
			d.Nodes = append(d.Nodes, n)
		}
	}
	if err == nil {
		o.obs.cluster, err = upgrade.Connect(o.Ctx, tc, d)
	}
	o.obs.clusterErr = err
	return o.obs.cluster, err
}

// osDiskTargets are the URNs --os-disk adds to the replaced VM: the node's
// OS volume and its config apply, whose inputs a fresh disk leaves
// unchanged (a replace makes the provider apply it again, in maintenance
// mode: terraform-provider-talos talosClientOp dials insecurely first).
func (o *Op) osDiskTargets() ([]string, error) {
	if !o.osDisk() {
		return nil, nil
	}
	var out []string
	for _, t := range [][2]string{{gate.TypeLibvirtVolume, osVolume(o.cfg, o.in.Replace[0])}, {gate.TypeConfigApply, o.in.Replace[0] + "-apply"}} {
		r, err := o.Find(t[0], t[1])
		if err != nil {
			return nil, err
		}
		if r != nil {
			out = append(out, string(r.URN))
		}
	}
	return out, nil
}

// unprotectOSVolume lifts, with --os-disk, the OS volume's protection,
// which the preview needs to plan its replace (Pulumi refuses to replace a
// resource protected in state and program alike: pkg/v3
// resource/deploy/step_generator.go, "new.Protect && old.Protect").
// closeObservations puts it back whatever happens.
func (o *Op) unprotectOSVolume() error {
	if !o.osDisk() {
		return nil
	}
	vol, err := o.Find(gate.TypeLibvirtVolume, osVolume(o.cfg, o.in.Replace[0]))
	if err != nil || vol == nil {
		return err // osDiskVolume refused a missing one
	}
	o.obs.osVolume = vol.URN
	return o.St.Unprotect(o.Ctx, []resource.URN{vol.URN})
}

// applyModes has the program send each node's Talos config in the mode
// the node's answer calls for (internal/applymode), decided once for the
// preview and the update that applies its plan. A node whose apply is not
// in state takes its first config (adopted when its VM is in state or
// imported by this run);
// --os-disk's node boots a new OS disk.
func (o *Op) applyModes() error {
	d := &applymode.Decider{First: map[string]bool{}, Fresh: map[string]bool{}, Adopted: map[string]bool{}, Recorded: map[string]string{}, Applied: map[string]string{}}
	applied, err := o.St.EachOutputsInClear(o.Ctx, gate.TypeConfigApply)
	if err != nil {
		return err
	}
	for _, n := range o.cfg.Nodes {
		apply, err := o.Find(gate.TypeConfigApply, n.Name+"-apply")
		if err != nil {
			return err
		}
		if apply == nil {
			d.First[n.Name] = true
			vm, err := o.nodeVM(n.Name)
			if err != nil {
				return err
			}
			// Its VM is in state, or imported in this run (nodes[i].adoptId:
			// `adopt --all` after a lost state, then `up`): either may run
			// a config this state does not know.
			d.Adopted[n.Name] = vm != nil || n.AdoptID != ""
			continue
		}
		d.Recorded[n.Name], _ = apply.Inputs["applyMode"].(string)
		d.Applied[n.Name], _ = applied[n.Name+"-apply"]["machineConfiguration"].(string)
	}
	if o.osDisk() {
		d.Fresh[o.in.Replace[0]] = true
	}
	ctx := o.Ctx
	o.in.RunOpts.ApplyMode = func(r applymode.Request) (string, error) { return d.Mode(ctx, r) }
	return nil
}

// shutdownReplaced runs once the gate passed and the delta is confirmed,
// right before the engine applies it: each replaced node is shut down and
// its VM waited for; with --os-disk, the node's etcd member is removed.
func (o *Op) shutdownReplaced() error {
	if len(o.in.Replace) == 0 {
		return nil
	}
	c, err := o.talosCluster()
	if err != nil || c == nil {
		return nil // replaceTalosAPI said why: the replace powers the VMs off
	}
	if err := c.ShutdownForReplace(o.Ctx, o.in.Replace, o.vmStopped, stopTimeout, upgrade.DefaultOptions(o.Out)); err != nil {
		return err
	}
	return c.Remove(o.Ctx, o.obs.removal, o.Out)
}

// afterReplace runs once the engine applied the delta: with --os-disk,
// the wait for the node to be an etcd member again. Then the apps are
// waited for: the run ends only once they are Ready again, so a next
// replace never starts on a sealed Vault.
func afterReplace(o *Op) error {
	if o.removing() {
		return afterRemove(o)
	}
	if len(o.in.Replace) == 0 {
		return afterAdd(o)
	}
	opts := upgrade.DefaultOptions(o.Out)
	if c, err := o.talosCluster(); err == nil && c != nil {
		if err := c.WaitRejoined(o.Ctx, o.obs.removal, rejoinTimeout, opts); err != nil {
			return err
		}
	}
	apps, err := o.Apps(false)
	if err != nil || apps == nil {
		return err
	}
	_, _ = fmt.Fprintf(o.Out, "milner up: waiting up to %s for the apps to be Ready again\n", opts.AppsTimeout)
	if err := apps.Wait(o.Ctx, opts); err != nil {
		return fmt.Errorf("%s replaced, but %w: do not replace another node before they are", strings.Join(o.in.Replace, ", "), err)
	}
	return nil
}

// closeObservations puts the OS volume's protection back (also after an
// interrupt: it is what keeps the volume safe) and closes the Talos
// clients. After a successful replace the program's Protect already holds
// for the new volume.
func (o *Op) closeObservations() {
	o.keepRetained()
	if u := o.obs.osVolume; u != "" {
		if err := o.St.Protect(context.WithoutCancel(context.Background()), []resource.URN{u}); err != nil {
			fmt.Fprintf(os.Stderr, "milner up: could not protect %s again: %v; run `pulumi state protect '%s'`\n", u.Name(), err, u)
		}
		o.obs.osVolume = ""
	}
	for _, c := range []**upgrade.Cluster{&o.obs.cluster, &o.upgrade.cluster} {
		if *c != nil {
			_ = (*c).Close()
			*c = nil
		}
	}
}

// vmStopped reports whether a node's VM (its id in state) has stopped: a
// libvirt domain shut off, a Proxmox VM "stopped", or gone.
func (o *Op) vmStopped(ctx context.Context, node string) (bool, error) {
	vm, err := o.nodeVM(node)
	if err != nil {
		return false, err
	}
	if vm == nil {
		return true, nil // no VM in state: nothing to wait for
	}
	live, _, err := o.listLive(ctx)
	if err != nil {
		return false, err
	}
	i := slices.IndexFunc(live, func(l guard.Object) bool { return gate.IsNodeVM(l.Type) && l.ID == vm.ID })
	return i < 0 || live[i].Stopped, nil
}

// oneNodeAtATime refuses --replace of several nodes once a cluster runs
// (a node holds a Talos config in state): the engine replaces the named
// VMs at once, and two nodes down at once can lose etcd's quorum (two of
// three control planes) or Vault's raft quorum (two of three peers).
func oneNodeAtATime(resources []engine.Resource, nodes []string) error {
	if len(nodes) < 2 || !slices.ContainsFunc(resources, func(r engine.Resource) bool { return r.Type == gate.TypeConfigApply }) {
		return nil
	}
	return Refused("--replace %s: on a running cluster a replace takes one node per run, and each run waits for the apps to be Ready again: run `milner up --replace %s` first (docs/runbooks/replace.md); nothing was changed", strings.Join(nodes, " --replace "), nodes[0])
}
