package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/milner/milner/components/vocab"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

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

// replaceRun is one `milner up --replace` run's Talos side.
type replaceRun struct {
	st       *engine.Stack
	nodes    []string
	cluster  *upgrade.Cluster // nil when no node holds a Talos config
	stopped  upgrade.StoppedFunc
	removal  *upgrade.MemberRemoval
	osVolume resource.URN  // unprotected for the run; "" without --os-disk
	apps     *upgrade.Apps // nil: no apps layer ran yet
}

// prepareReplace runs before the preview. With --os-disk it refuses what
// may not be done (a second node, a Proxmox stack, the last control plane,
// a removal that loses etcd quorum) and lifts the OS volume's protection,
// which the preview needs to plan its replace (Pulumi refuses to replace a
// resource protected in state and program alike: pkg/v3
// resource/deploy/step_generator.go, "new.Protect && old.Protect"). close
// puts it back whatever happens.
func prepareReplace(o *op, f *gatedFlags) (_ *replaceRun, err error) {
	r := &replaceRun{st: o.st, nodes: f.replace}
	switch {
	case len(f.replace) == 0 && f.osDisk:
		return nil, usageError{errors.New("--os-disk needs --replace <node>")}
	case len(f.replace) == 0:
		return r, nil
	case f.osDisk && len(f.replace) != 1:
		return nil, usageError{fmt.Errorf("--os-disk recovers one node at a time (got --replace %v)", f.replace)}
	}
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	resources, err := o.resources()
	if err != nil {
		return nil, err
	}
	if err := oneNodeAtATime(resources, f.replace); err != nil {
		return nil, err
	}
	if r.apps, err = appsOf(o, false); err != nil {
		return nil, err
	}
	if f.osDisk && cfg.Substrate.Kind != config.KindLibvirt {
		return nil, refused("--os-disk: a %s node's OS disk is a disk of its holder VM, not a volume of its own; follow docs/runbooks/lost-os-disk.md (Proxmox); nothing was changed", cfg.Substrate.Kind)
	}
	r.stopped = vmStopped(o)
	if err := r.connect(o, f.talosconfig); err != nil {
		if f.osDisk {
			return nil, refused("--os-disk: the Talos API is needed to remove the node's etcd member: %v; nothing was changed", err)
		}
		fmt.Fprintf(os.Stderr, "milner up: the nodes cannot be asked to shut down (%v); the replace powers their VMs off\n", err)
	}
	if !f.osDisk {
		return r, nil
	}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.cluster != nil {
		if r.removal, err = r.cluster.MemberRemovalFor(o.ctx, f.replace[0]); errors.Is(err, upgrade.ErrUnsafeMemberRemoval) {
			return nil, refused("--os-disk %s: %v", f.replace[0], err)
		} else if err != nil {
			return nil, err
		}
	}
	vol, err := o.find(gate.TypeLibvirtVolume, osVolume(cfg, f.replace[0]))
	if err != nil {
		return nil, err
	}
	if vol == nil {
		return nil, refused("--os-disk %s: the state has no OS volume %q; nothing was changed", f.replace[0], osVolume(cfg, f.replace[0]))
	}
	r.osVolume = vol.URN
	return r, o.st.Unprotect(o.ctx, []resource.URN{r.osVolume})
}

// osVolume is the logical name of a libvirt node's OS volume.
func osVolume(cfg *config.Config, node string) string {
	return cfg.Cluster.Name + "-" + node + vocab.OSSuffix
}

// connect dials the nodes' Talos API with the talosconfig askVersions uses;
// a stack whose state holds no Talos config yet has nothing to ask.
func (r *replaceRun) connect(o *op, file string) error {
	tc, err := nodesTalosconfig(o, file, true)
	if errors.Is(err, errNoTalosConfig) {
		fmt.Fprintf(os.Stderr, "milner up: %v: nothing to shut down before the replace\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	r.cluster, err = upgrade.Connect(o.ctx, tc, upgrade.FromConfig(o.cfg))
	return err
}

// before runs once the gate passed and the delta is confirmed, right
// before the engine applies it: each replaced node is shut down and its VM
// waited for; with --os-disk, the node's etcd member is removed.
func (r *replaceRun) before(o *op) error {
	if len(r.nodes) == 0 {
		return nil
	}
	if err := r.appsBefore(o); err != nil {
		return err
	}
	if r.cluster == nil {
		return nil
	}
	if err := r.cluster.ShutdownForReplace(o.ctx, r.nodes, r.stopped, stopTimeout, upgrade.DefaultOptions(o.out)); err != nil {
		return err
	}
	return r.cluster.Remove(o.ctx, r.removal, o.out)
}

// after runs once the engine applied the delta: with --os-disk, the wait
// for the node to be an etcd member again.
// Then the apps are waited for: the run ends only once they are Ready
// again, so a next replace never starts on a sealed Vault.
func (r *replaceRun) after(o *op) error {
	opts := upgrade.DefaultOptions(o.out)
	if r.cluster != nil {
		if err := r.cluster.WaitRejoined(o.ctx, r.removal, rejoinTimeout, opts); err != nil {
			return err
		}
	}
	if r.apps == nil || len(r.nodes) == 0 {
		return nil
	}
	_, _ = fmt.Fprintf(o.out, "milner up: waiting up to %s for the apps to be Ready again\n", opts.AppsTimeout)
	if err := r.apps.Wait(o.ctx, opts); err != nil {
		return fmt.Errorf("%s replaced, but %w: do not replace another node before they are", strings.Join(r.nodes, ", "), err)
	}
	return nil
}

// appsBefore refuses a replace while an app Pod on another node is not
// Ready (a sealed Vault peer: the replace would take a second one down,
// and raft's quorum with it). The replaced node's own Pods are excused:
// it may be dead. An API that cannot be asked (the recovery of a cluster
// already down) is reported and the replace goes on.
func (r *replaceRun) appsBefore(o *op) error {
	err := r.apps.ReadyBesides(o.ctx, r.nodes)
	var notReady *upgrade.NotReadyError
	switch {
	case errors.As(err, &notReady):
		return refused("--replace %s: %v; replacing now would take another peer down; nothing was changed", strings.Join(r.nodes, ", "), err)
	case err != nil:
		_, _ = fmt.Fprintf(o.out, "milner up: the apps cannot be asked (%v): the replace goes on without the apps gate\n", err)
	}
	return nil
}

// oneNodeAtATime refuses --replace of several nodes once a cluster runs
// (a node holds a Talos config in state): the engine replaces the named
// VMs at once, and two nodes down at once can lose etcd's quorum (two of
// three control planes) or Vault's raft quorum (two of three peers).
func oneNodeAtATime(resources []engine.Resource, nodes []string) error {
	if len(nodes) < 2 || !slices.ContainsFunc(resources, func(r engine.Resource) bool { return r.Type == gate.TypeConfigApply }) {
		return nil
	}
	return refused("--replace %s: on a running cluster a replace takes one node per run, and each run waits for the apps to be Ready again: run `milner up --replace %s` first (docs/runbooks/replace.md); nothing was changed", strings.Join(nodes, " --replace "), nodes[0])
}

// close puts the OS volume's protection back (also after an interrupt: it
// is what keeps the volume safe) and closes the Talos clients. After a
// successful replace the program's Protect already holds for the new volume.
func (r *replaceRun) close() {
	if r.osVolume != "" {
		if err := r.st.Protect(context.WithoutCancel(context.Background()), []resource.URN{r.osVolume}); err != nil {
			fmt.Fprintf(os.Stderr, "milner up: could not protect %s again: %v; run `pulumi state protect '%s'`\n", r.osVolume.Name(), err, r.osVolume)
		}
	}
	if r.cluster != nil {
		_ = r.cluster.Close()
	}
}

// osDiskTargets are the URNs --os-disk adds to the replaced VM: the node's
// OS volume and its config apply, whose inputs a fresh disk leaves
// unchanged (a replace makes the provider apply it again, in maintenance
// mode: terraform-provider-talos talosClientOp dials insecurely first).
func osDiskTargets(o *op, f *gatedFlags) ([]string, error) {
	if !f.osDisk || len(f.replace) != 1 {
		return nil, nil
	}
	var out []string
	for _, t := range [][2]string{{gate.TypeLibvirtVolume, osVolume(o.cfg, f.replace[0])}, {gate.TypeConfigApply, f.replace[0] + "-apply"}} {
		r, err := o.find(t[0], t[1])
		if err != nil {
			return nil, err
		}
		if r != nil {
			out = append(out, string(r.URN))
		}
	}
	return out, nil
}

// vmStopped reports whether a node's VM (its id in state) has stopped: a
// libvirt domain shut off, a Proxmox VM "stopped", or gone.
func vmStopped(o *op) upgrade.StoppedFunc {
	return func(ctx context.Context, node string) (bool, error) {
		vm, err := o.nodeVM(node)
		if err != nil {
			return false, err
		}
		if vm == nil {
			return true, nil // no VM in state: nothing to wait for
		}
		live, _, err := listLive(ctx, o)
		if err != nil {
			return false, err
		}
		i := slices.IndexFunc(live, func(l guard.Object) bool { return gate.IsNodeVM(l.Type) && l.ID == vm.ID })
		return i < 0 || live[i].Stopped, nil
	}
}
