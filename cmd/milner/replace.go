package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/pve"
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
func prepareReplace(ctx context.Context, st *engine.Stack, f *gatedFlags) (*replaceRun, error) {
	r := &replaceRun{st: st, nodes: f.replace}
	if len(f.replace) == 0 {
		if f.osDisk {
			return nil, usageError{errors.New("--os-disk needs --replace <node>")}
		}
		return r, nil
	}
	if f.osDisk && len(f.replace) != 1 {
		return nil, usageError{fmt.Errorf("--os-disk recovers one node at a time (got --replace %v)", f.replace)}
	}
	cfg, _, err := loadStack(st)
	if err != nil {
		return nil, err
	}
	resources, err := st.Resources(ctx)
	if err != nil {
		return nil, err
	}
	if err := oneNodeAtATime(resources, f.replace); err != nil {
		return nil, err
	}
	if r.apps, err = appsOf(ctx, st, cfg, false); err != nil {
		return nil, err
	}
	if f.osDisk && cfg.Substrate.Kind != config.KindLibvirt {
		return nil, refused("--os-disk: a %s node's OS disk is a disk of its holder VM, not a volume of its own; follow docs/runbooks/lost-os-disk.md (Proxmox); nothing was changed", cfg.Substrate.Kind)
	}
	r.stopped = vmStopped(st, cfg, resources)
	if err := r.connect(ctx, st, cfg, f.talosconfig, resources); err != nil {
		if f.osDisk {
			return nil, refused("--os-disk: the Talos API is needed to remove the node's etcd member: %v; nothing was changed", err)
		}
		fmt.Fprintf(os.Stderr, "milner up: the nodes cannot be asked to shut down (%v); the replace powers their VMs off\n", err)
	}
	if !f.osDisk {
		return r, nil
	}
	if r.cluster != nil {
		if r.removal, err = r.cluster.MemberRemovalFor(ctx, f.replace[0]); err != nil {
			r.close()
			if errors.Is(err, upgrade.ErrUnsafeMemberRemoval) {
				return nil, refused("--os-disk %s: %v", f.replace[0], err)
			}
			return nil, err
		}
	}
	vol := cfg.Cluster.Name + "-" + f.replace[0] + config.OSSuffix
	for _, res := range resources {
		if res.Type == gate.TypeLibvirtVolume && res.Name() == vol {
			r.osVolume = res.URN
		}
	}
	if r.osVolume == "" {
		r.close()
		return nil, refused("--os-disk %s: the state has no OS volume %q; nothing was changed", f.replace[0], vol)
	}
	if err := st.Unprotect(ctx, []resource.URN{r.osVolume}); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// connect dials the nodes' Talos API with the talosconfig askVersions uses;
// a stack whose state holds no Talos config yet has nothing to ask.
func (r *replaceRun) connect(ctx context.Context, st *engine.Stack, cfg *config.Config, file string, resources []engine.Resource) error {
	applied := false
	for _, res := range resources {
		applied = applied || res.Type == gate.TypeConfigApply
	}
	if !applied && file == "" {
		fmt.Fprintln(os.Stderr, "milner up: no node holds a Talos config in the state: nothing to shut down before the replace")
		return nil
	}
	tc, err := versionsTalosconfig(ctx, st, file)
	if err != nil {
		return err
	}
	r.cluster, err = upgrade.Connect(ctx, tc, upgrade.FromConfig(cfg))
	return err
}

// before runs once the gate passed and the delta is confirmed, right
// before the engine applies it: each replaced node is shut down and its VM
// waited for; with --os-disk, the node's etcd member is removed.
func (r *replaceRun) before(ctx context.Context, out io.Writer) error {
	if len(r.nodes) == 0 {
		return nil
	}
	if err := r.appsBefore(ctx, out); err != nil {
		return err
	}
	if r.cluster == nil {
		return nil
	}
	o := upgrade.DefaultOptions(out)
	if err := r.cluster.ShutdownForReplace(ctx, r.nodes, r.stopped, stopTimeout, o); err != nil {
		return err
	}
	return r.cluster.Remove(ctx, r.removal, out)
}

// after runs once the engine applied the delta: with --os-disk, the wait
// for the node to be an etcd member again.
// Then the apps are waited for: the run ends only once they are Ready
// again, so a next replace never starts on a sealed Vault.
func (r *replaceRun) after(ctx context.Context, out io.Writer) error {
	o := upgrade.DefaultOptions(out)
	if r.cluster != nil {
		if err := r.cluster.WaitRejoined(ctx, r.removal, rejoinTimeout, o); err != nil {
			return err
		}
	}
	if r.apps == nil || len(r.nodes) == 0 {
		return nil
	}
	fmt.Fprintf(out, "milner up: waiting up to %s for the apps to be Ready again\n", o.AppsTimeout)
	if err := r.apps.Wait(ctx, o); err != nil {
		return fmt.Errorf("%s replaced, but %w: do not replace another node before they are", strings.Join(r.nodes, ", "), err)
	}
	return nil
}

// appsBefore refuses a replace while an app Pod on another node is not
// Ready (a sealed Vault peer: the replace would take a second one down,
// and raft's quorum with it). The replaced node's own Pods are excused:
// it may be dead. An API that cannot be asked (the recovery of a cluster
// already down) is reported and the replace goes on.
func (r *replaceRun) appsBefore(ctx context.Context, out io.Writer) error {
	if r.apps == nil {
		return nil
	}
	err := r.apps.ReadyBesides(ctx, r.nodes)
	var notReady *upgrade.NotReadyError
	switch {
	case errors.As(err, &notReady):
		return refused("--replace %s: %v; replacing now would take another peer down; nothing was changed", strings.Join(r.nodes, ", "), err)
	case err != nil:
		fmt.Fprintf(out, "milner up: the apps cannot be asked (%v): the replace goes on without the apps gate\n", err)
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
func osDiskTargets(resources []engine.Resource, cluster string, f *gatedFlags) []string {
	if !f.osDisk || len(f.replace) != 1 {
		return nil
	}
	var out []string
	for _, res := range resources {
		if (res.Type == gate.TypeLibvirtVolume && res.Name() == cluster+"-"+f.replace[0]+config.OSSuffix) ||
			(res.Type == gate.TypeConfigApply && res.Name() == f.replace[0]+"-apply") {
			out = append(out, string(res.URN))
		}
	}
	return out
}

// vmStopped reports whether a node's VM (its id in state) has stopped: a
// libvirt domain shut off, a Proxmox VM "stopped", or gone.
func vmStopped(st *engine.Stack, cfg *config.Config, resources []engine.Resource) upgrade.StoppedFunc {
	cluster, sub := cfg.Cluster.Name, cfg.Substrate
	id := func(node string) string {
		for _, res := range resources {
			if gate.IsNodeVM(res.Type) && res.Name() == cluster+"-"+node {
				return res.ID
			}
		}
		return ""
	}
	var pc *pve.Client // dialled on first use
	return func(ctx context.Context, node string) (bool, error) {
		want := id(node)
		switch sub.Kind {
		case config.KindLibvirt:
			live, err := guard.ListLibvirt(sub.Libvirt.URI)
			if err != nil {
				return false, err
			}
			for _, o := range live {
				if o.Type == gate.TypeLibvirtDomain && o.ID == want {
					return o.Stopped, nil
				}
			}
			return true, nil
		case config.KindProxmox:
			if pc == nil {
				c, err := proxmoxClient(st, cfg)
				if err != nil || c == nil {
					return false, err
				}
				pc = c
			}
			c := pc
			vms, err := c.VMs(ctx)
			if err != nil {
				return false, err
			}
			for _, vm := range vms {
				if strconv.Itoa(vm.VMID) == want {
					return vm.Status == "stopped", nil
				}
			}
			return true, nil
		}
		return false, fmt.Errorf("substrate %q: cannot tell whether a VM stopped", sub.Kind)
	}
}
