package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/apiready"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/stacks"
)

func upCmd() *cobra.Command {
	// Decided from the gated preview, read when the update runs.
	run := &stacks.RunOptions{}
	f := &gatedFlags{runOpts: run}
	f.program = stacks.NewProgram(run)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Preview, refuse what the layer rules forbid, confirm, then apply exactly the previewed delta",
		Long: `up refuses, before touching anything, live substrate objects missing from
the state (empty state, orphans: it prints the adopt commands), then
previews and refuses any delta the layer rules forbid: a replace or delete
of persistent substrate, a replace of anything but a named node VM, the
delete of a Helm release or of the cluster secrets, an update of a node's
Talos config while a node runs other versions than declared (Talos would
apply new Kubernetes images to every node at once: run 'milner upgrade').
After you type the stack name
(or --yes) it applies the preview's own plan: the engine fails any step
the preview did not show rather than take it. Each node named with
--replace is first asked to shut down through the Talos API (Talos
cordons and drains it) and its VM given a bounded time to stop; a node
that does not answer is reported and replaced anyway. On a running
cluster --replace takes one node per run: first every app Pod on the
other nodes must be Ready (a sealed Vault peer refuses the replace), and
the run ends only once the apps are Ready again (up to 10 minutes).`,
		Example: `  milner up --stack dev
  milner up --stack dev --replace cp-2   # recovery: recreate cp-2's VM only; its disks stay
  milner up --stack dev --replace cp-2 --os-disk   # cp-2's OS disk is lost: fresh OS volume, data volume kept
  milner up --stack dev --yes            # scripts: no prompt`,
		RunE: f.run(true, func(o *op) (err error) {
			var g *gated
			defer func() {
				if g != nil {
					err = emit(f.json, g, err)
				}
			}()
			rp, err := prepareReplace(o, f)
			if err != nil {
				return err
			}
			defer rp.close()
			g, plan, err := previewGated(o, f)
			if err != nil {
				return err
			}
			if err := g.verdict(f); err != nil || g.Report.Empty() {
				return err
			}
			if err := o.confirm("Apply exactly this delta?"); err != nil {
				return err
			}
			// The cluster health check runs only when the Talos layer changes
			// beyond the replaced nodes: a dead node never blocks its own recovery.
			run.SkipHealthCheck = !g.Report.TalosChanged(f.replace)
			if run.AwaitAPIServer, err = awaitAPIServers(o, g.Report); err != nil {
				return err
			}
			if err := rp.before(o); err != nil {
				return err
			}
			result, err := o.st.UpPlan(o.ctx, plan)
			if err != nil {
				return err
			}
			g.Applied = true
			if g.Staged = gate.Staged(gate.AppliedModes(result.Events)); len(g.Staged) > 0 {
				_, _ = fmt.Fprintf(o.out, "milner up: Talos config staged, pending a reboot of: %s (reboot them one at a time)\n", strings.Join(g.Staged, ", "))
			}
			return rp.after(o)
		}),
	}
	f.add(cmd)
	f.addYes(cmd)
	cmd.Flags().BoolVar(&f.osDisk, "os-disk", false, "with --replace <node>: the node's OS disk is lost; remove its etcd member, replace its VM and OS volume (never the data volume), re-apply its config, wait for it to rejoin (docs/runbooks/lost-os-disk.md)")
	f.allowContract = new(bool)
	cmd.Flags().BoolVar(f.allowContract, "allow-contract-change", false, "apply a change of milner:cluster.configContract (changes every node's config defaults)")
	return cmd
}

// awaitAPIServers is the wait between two control planes' applies
// (internal/apiready) for the nodes whose Talos config the reviewed plan
// updates, asked with the stack's kubeconfig. nil when the plan updates
// none, or when the state holds no kubeconfig yet (a first bring-up: no
// API server runs before the bootstrap, which follows every apply).
func awaitAPIServers(o *op, r gate.Report) (func(string, netip.Addr) error, error) {
	updated := map[string]bool{}
	for _, c := range r.Delta(gate.Talos).Updates {
		if c.Type == gate.TypeConfigApply {
			updated[c.Node] = true
		}
	}
	if len(updated) == 0 {
		return nil, nil
	}
	outs, err := o.outputs()
	if err != nil {
		return nil, err
	}
	kube, _ := outs[kubeconfig.output].(string)
	if kube == "" {
		return nil, nil
	}
	opts := apiready.Defaults
	opts.Out = o.out
	ctx := o.ctx
	return func(node string, addr netip.Addr) error {
		if !updated[node] {
			return nil
		}
		return apiready.Wait(ctx, []byte(kube), node, netip.AddrPortFrom(addr, apiready.Port), opts)
	}, nil
}

// checkContract refuses, before anything is previewed, a change of the
// config contract the cluster's secrets bundle was created with, unless
// it is explicitly allowed.
func checkContract(o *op, allow bool) error {
	bundle, err := o.find(gate.TypeTalosSecrets, "")
	if err != nil {
		return err
	}
	recorded := ""
	if bundle != nil {
		recorded, _ = bundle.Inputs["talosVersion"].(string)
	}
	if refusals := gate.CheckContract(recorded, o.cfg.Cluster.ConfigContract, allow); len(refusals) > 0 {
		return refused("%s; nothing was changed", refusals[0])
	}
	return nil
}
