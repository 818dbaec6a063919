package pipeline

import (
	"fmt"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/stacks/config"
)

// importTalosLayer refuses an import into a stack without a Talos layer:
// it has no secrets bundle.
func importTalosLayer(o *Op) ([]gate.Refusal, error) {
	if o.cfg.Declares(config.LayerTalos) {
		return nil, nil
	}
	return nil, Refused("stack %q declares no Talos layer, so it has no secrets bundle; nothing was changed", o.St.Name())
}

// importNoBundle refuses an import into a stack whose state already holds
// a bundle: importing again would replace the cluster's root of trust.
func importNoBundle(o *Op) ([]gate.Refusal, error) {
	held, err := o.Find(gate.TypeTalosSecrets, "")
	if err != nil || held == nil {
		return nil, err
	}
	return nil, Refused("stack %q already holds the secrets bundle %s; an import would replace the cluster's root of trust, so nothing was changed (a damaged state: docs/runbooks/recover.md)", o.St.Name(), held.Name())
}

// bundleName is the logical name of the stack's secrets bundle.
func (o *Op) bundleName() string { return o.cfg.Cluster.Name + "-secrets" }

// importApply imports the bundle the program (stacks.SecretsBundle) was
// given by an update targeted at the bundle alone.
func importApply(o *Op, _ *Outcome) error {
	r, err := o.St.UpTarget(o.Ctx, gate.TypeTalosSecrets, o.bundleName())
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(r.Steps, func(s gate.Step) bool { return s.Type == gate.TypeTalosSecrets && s.Op == apitype.OpImport }) {
		return fmt.Errorf("stack %q: the update imported no %s", o.St.Name(), o.bundleName())
	}
	return nil
}

// importAfter says what comes next.
func importAfter(o *Op) error {
	fmt.Printf("milner secrets: imported the secrets bundle into stack %q as %s (protected, its outputs secret); next: adopt the nodes, then `milner preview --stack %s` must plan no create of a secrets bundle\n", o.St.Name(), o.bundleName(), o.St.Name())
	return nil
}
