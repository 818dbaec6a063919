package pipeline

import (
	"net/netip"
	"slices"
	"time"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/kubeconfignode"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
)

// kubeconfigAskTimeout bounds asking one control plane whether it answers;
// the control planes other than the recorded one are asked at once.
const kubeconfigAskTimeout = 5 * time.Second

// kubeconfigNode has the program's Kubeconfig resource ask a control plane
// of the config that answers (internal/kubeconfignode), chosen once for
// the preview and the update that applies its plan: the one the state's
// kubeconfig names while it answers. The nodes --replace names are
// avoided. Without a secrets bundle in state (a first bring-up) nothing is
// asked: the first control plane.
func (o *Op) kubeconfigNode() error {
	if !o.cfg.Declares(config.LayerTalos) {
		return nil
	}
	ch := &kubeconfignode.Chooser{}
	kc, err := o.Find(gate.TypeKubeconfig, o.cfg.Cluster.Name+"-kubeconfig")
	if err != nil {
		return err
	}
	if kc != nil {
		ch.Recorded, _ = kc.Inputs["node"].(string)
	}
	for _, n := range o.cfg.Nodes {
		if slices.Contains(o.in.Replace, n.Name) {
			ch.Avoid = append(ch.Avoid, n.Addr)
		}
	}
	bundle, err := o.Find(gate.TypeTalosSecrets, "")
	if err != nil {
		return err
	}
	if bundle != nil {
		tc, err := o.bundleTalosconfig(upgrade.FromConfig(o.cfg))
		if err != nil {
			return err
		}
		ch.Answers = kubeconfignode.TalosAPI(tc, nil, kubeconfigAskTimeout)
	}
	ctx := o.Ctx
	o.in.RunOpts.KubeconfigNode = func(cps []netip.Addr) netip.Addr { return ch.Choose(ctx, cps) }
	return nil
}
