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
	fmt.Printf("milner teardown will DELETE every resource of stack %q (cluster %s), protected disks and data included:\n", o.St.Name(), o.cfg.Cluster.Name)
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
		fmt.Printf("  - %s %s%s\n", r.Type, r.Name(), mark)
	}
	if retained > 0 {
		fmt.Printf("%d retained resources are removed from the state only and stay where they are (remove them by hand, docs/proxmox.md)\n", retained)
	}
	return &Outcome{Stack: o.St.Name(), Refusals: found}
}

// teardownClusterName refuses a deprecated --confirm that is not the
// cluster's name.
func teardownClusterName(o *Op) ([]gate.Refusal, error) {
	if c := o.in.ConfirmName; c != "" && c != o.cfg.Cluster.Name {
		return []gate.Refusal{{Resource: "--confirm", Reason: fmt.Sprintf("--confirm %q is not the cluster name %q; nothing was deleted", c, o.cfg.Cluster.Name)}}, nil
	}
	return nil, nil
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
func teardownApply(o *Op, _ *Outcome) error {
	reprotect, err := o.unprotectProxmoxHolders()
	if err != nil {
		return err
	}
	// Putting protection back runs even after an interrupt: it is what
	// leaves the holders safe when the destroy stopped.
	st, keep := o.St, context.WithoutCancel(o.Ctx)
	err = st.UnprotectAll(o.Ctx)
	if err == nil {
		_, err = st.Destroy(o.Ctx)
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
	fmt.Printf("milner teardown: stack %q is empty; the %s contexts are removed from the kubeconfig and talosconfig\n", o.St.Name(), cluster)
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
