package pipeline

import (
	"fmt"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/secretsbundle"
	"github.com/milner/milner/stacks/config"
)

// Bundle is the Talos secrets bundle in the stack's state.
func (o *Op) Bundle() (*secrets.Bundle, error) {
	_, outs, err := o.St.OutputsInClear(o.Ctx, gate.TypeTalosSecrets)
	if err != nil {
		return nil, err
	}
	ms, ok := outs["machineSecrets"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("stack %q: the secrets bundle has no machineSecrets output", o.St.Name())
	}
	return secretsbundle.FromState(ms)
}

// ExportSecrets is `milner secrets export`: the bundle in state, in the
// YAML the provider's import reads, age-encrypted for every recipient and
// written 0600 to out.
func ExportSecrets(o *Op, out string, recipients []string) error {
	b, err := o.Bundle()
	if err != nil {
		return err
	}
	plain, err := secretsbundle.Marshal(b)
	if err != nil {
		return err
	}
	sealed, err := secretsbundle.Encrypt(plain, recipients)
	if err != nil {
		return err
	}
	return engine.WritePrivateFile(out, sealed)
}

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
	_, _ = fmt.Fprintf(o.Out, "milner secrets: imported the secrets bundle into stack %q as %s (protected, its outputs secret); next: adopt the nodes, then `milner preview --stack %s` must plan no create of a secrets bundle\n", o.St.Name(), o.bundleName(), o.St.Name())
	return nil
}
