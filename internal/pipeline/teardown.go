package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/internal/clientfiles"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/stacks/config"
)

// teardownRun is a teardown's plan: every resource but the stack's root,
// and the protected ones among them.
type teardownRun struct {
	resources []engine.Resource
	protected []resource.URN
}

// teardownPlan is the whole stack: a teardown has no other plan.
func teardownPlan(o *Op) error {
	resources, err := o.Resources()
	if err != nil {
		return err
	}
	t := &o.teardown
	for _, r := range resources {
		if r.Type == string(resource.RootStackType) {
			continue
		}
		t.resources = append(t.resources, r)
		if r.Protect {
			t.protected = append(t.protected, r.URN)
		}
	}
	return nil
}

// teardownReport lists everything the teardown deletes.
func teardownReport(o *Op, found []Finding) *Outcome {
	_, _ = fmt.Fprintf(o.Out, "milner teardown will DELETE every resource of stack %q (cluster %s), protected disks and data included:\n", o.St.Name(), o.cfg.Cluster.Name)
	retained := 0
	for _, r := range o.teardown.resources {
		mark := ""
		switch {
		case r.RetainOnDelete:
			// Images and first-config snippets: a delete only forgets them.
			mark = " (retained: left where it is, not deleted)"
			retained++
		case r.Protect:
			mark = " (protected)"
		}
		_, _ = fmt.Fprintf(o.Out, "  - %s %s%s\n", r.Type, r.Name(), mark)
	}
	if retained > 0 {
		_, _ = fmt.Fprintf(o.Out, "%d retained resources are removed from the state only and stay where they are (remove them by hand, docs/proxmox.md)\n", retained)
	}
	return &Outcome{Stack: o.St.Name(), Backend: o.St.Backend(), Refusals: found}
}

// teardownClusterName refuses a deprecated --confirm that is not the
// cluster's name.
func teardownClusterName(o *Op) ([]gate.Refusal, error) {
	if c := o.in.ConfirmName; c != "" && c != o.cfg.Cluster.Name {
		return []gate.Refusal{{Resource: "--confirm", Reason: fmt.Sprintf("--confirm %q is not the cluster name %q; nothing was deleted", c, o.cfg.Cluster.Name)}}, nil
	}
	return nil, nil
}

// teardownKeptVolumes refuses a teardown while the cluster's libvirt pool
// holds volumes its state does not: those a `milner up --remove` kept on
// the host, or any other. libvirt deletes a directory pool only once it is
// empty (terraform-provider-libvirt v0.8.3 resourceLibvirtPoolDelete:
// StoragePoolDelete, the dir backend's rmdir), so the destroy would fail
// at the pool after it deleted everything else. The refusal names each
// with the command that deletes it: their delete is the operator's own.
func teardownKeptVolumes(o *Op) ([]gate.Refusal, error) {
	if o.cfg.Substrate.Kind != config.KindLibvirt {
		return nil, nil
	}
	i := slices.IndexFunc(o.teardown.resources, func(r engine.Resource) bool { return r.Type == gate.TypeLibvirtPool })
	if i < 0 {
		return nil, nil
	}
	pool, _ := o.teardown.resources[i].Inputs["name"].(string)
	live, _, err := o.listLive(o.Ctx)
	if err != nil {
		return nil, fmt.Errorf("list the volumes of pool %s: %w", pool, err)
	}
	kept := keptVolumes(pool, o.cfg.Substrate.Libvirt.URI, o.teardown.resources, live)
	if len(kept) == 0 {
		return nil, nil
	}
	return []gate.Refusal{{Resource: pool, Reason: fmt.Sprintf("pool %s holds %d volumes the state of stack %q does not (kept by `milner up --remove`, or put there by hand); libvirt deletes a pool only empty, so the teardown would stop at the pool after deleting everything else. Delete each first if you are sure, or move it out of the pool; nothing was deleted:\n  %s",
		pool, len(kept), o.St.Name(), strings.Join(kept, "\n  "))}}, nil
}

// keptVolumes are the live volumes of pool whose ids (paths) the state's
// resources do not hold, each with the command that deletes it, sorted.
func keptVolumes(pool, uri string, resources []engine.Resource, live []guard.Object) []string {
	inState := map[string]bool{}
	for _, r := range resources {
		if r.Type == gate.TypeLibvirtVolume {
			inState[r.ID] = true
		}
	}
	var kept []string
	for _, l := range live {
		if l.Type == gate.TypeLibvirtVolume && l.Pool == pool && !inState[l.ID] {
			kept = append(kept, fmt.Sprintf("%s: virsh -c %s vol-delete %s", l.Name, uri, l.ID))
		}
	}
	slices.Sort(kept)
	return kept
}

// teardownVerdict refuses in the rule's own words.
func teardownVerdict(_ *Op, g *Outcome) error {
	if len(g.Refusals) == 0 {
		return nil
	}
	return &Refusal{Rule: g.Refusals[0].Rule, Msg: g.Refusals[0].Reason}
}

// teardownApply lifts every protection and destroys the stack; if the
// destroy fails, what it had unprotected and not yet deleted is protected
// again. Proxmox holders also carry PVE's own protection flag, which
// Pulumi's unprotect does not clear: it is cleared here, and set again on
// what is left if the destroy fails.
func teardownApply(o *Op, g *Outcome) error {
	reprotect, err := o.unprotectProxmoxHolders()
	if err != nil {
		return err
	}
	// Putting protection back runs even after an interrupt: it is what
	// leaves the holders safe when the destroy stopped.
	st, keep := o.St, context.WithoutCancel(o.Ctx)
	err = st.UnprotectAll(o.Ctx)
	if err == nil {
		var r *engine.Result
		r, err = st.Destroy(o.Ctx)
		if r != nil && o.in.JSON {
			g.Pulumi, _ = r.JSON() // the engine's events: marshalling them cannot fail
		}
	}
	if err == nil {
		return nil
	}
	err = errors.Join(err, reprotect(keep))
	// Put the protect flag back on what is left of what it had.
	left, rerr := st.Resources(keep)
	if rerr == nil {
		rerr = st.Protect(keep, slices.DeleteFunc(o.teardown.protected, func(u resource.URN) bool {
			return !slices.ContainsFunc(left, func(r engine.Resource) bool { return r.URN == u })
		}))
	}
	return errors.Join(err, rerr, fmt.Errorf("teardown of %q stopped; %d resources left, the protected ones protected again; fix the error and run it again", st.Name(), len(left)))
}

// teardownAfter removes the cluster's contexts from the kubeconfig and
// talosconfig `milner kubeconfig` and `milner talosconfig` wrote.
func teardownAfter(o *Op) error {
	cluster := o.cfg.Cluster.Name
	for _, c := range []clientfiles.Config{clientfiles.Kube, clientfiles.Talos} {
		if err := c.RemoveFrom(cluster, ""); err != nil {
			return err
		}
	}
	_, _ = fmt.Fprintf(o.Out, "milner teardown: stack %q is empty; the %s contexts are removed from the kubeconfig and talosconfig\n", o.St.Name(), cluster)
	return nil
}

// unprotectProxmoxHolders clears PVE's protection flag of the disk holders
// in the stack's state. The returned reprotect protects again those still
// alive (it does nothing for a non-Proxmox stack).
func (o *Op) unprotectProxmoxHolders() (func(context.Context) error, error) {
	c, err := o.proxmox()
	if err != nil || c == nil {
		return func(context.Context) error { return nil }, err
	}
	var ids []int
	for _, r := range o.teardown.resources {
		// The bpg provider's VM id is the PVE VM id.
		if r.Type == gate.TypeProxmoxVM && strings.HasSuffix(r.Name(), vocab.HolderSuffix) {
			if id, err := strconv.Atoi(r.ID); err == nil {
				ids = append(ids, id)
			}
		}
	}
	return c.Unprotect(o.Ctx, ids)
}
