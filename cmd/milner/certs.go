package main

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/milner/milner/internal/certs"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/secretsbundle"
)

// stackBundle is the secrets bundle in the stack's state.
func stackBundle(o *op) (*secrets.Bundle, error) {
	_, outs, err := o.st.OutputsInClear(o.ctx, gate.TypeTalosSecrets)
	if err != nil {
		return nil, err
	}
	ms, ok := outs["machineSecrets"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("stack %q: the secrets bundle has no machineSecrets output", o.st.Name())
	}
	return secretsbundle.FromState(ms)
}

// certLifetimes are the stack's client certificates and CAs, as `milner
// status` shows them; what cannot be read says why.
func certLifetimes(o *op) []certs.Cert {
	outs, err := o.st.Outputs(o.ctx, true)
	if err != nil {
		return []certs.Cert{{Name: "certificates", Err: err.Error()}}
	}
	talos, _ := outs[talosconfig.output].(string)
	kube, _ := outs[kubeconfig.output].(string)
	bundle, err := stackBundle(o)
	return certs.Lifetimes(talos, kube, bundle, err)
}

// renewers issue a client config's certificate anew from the bundle, by
// the stack output that holds it.
var renewers = map[string]func(string, *secrets.Bundle) (string, error){
	kubeconfig.output:  certs.RenewKubeconfig,
	talosconfig.output: certs.RenewTalosconfig,
}

// renewClient returns raw (the stack's client config) with a client
// certificate issued now from the stack's secrets bundle: no apply, the
// state keeps the old one.
func renewClient(o *op, output, raw string) (string, error) {
	bundle, err := stackBundle(o)
	if err != nil {
		return "", fmt.Errorf("renew the %s client certificate: %w", output, err)
	}
	return renewers[output](raw, bundle)
}
