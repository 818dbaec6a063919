package main

import (
	"context"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/milner/milner/internal/certs"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/secretsbundle"
)

// stackBundle is the secrets bundle in the stack's state.
func stackBundle(ctx context.Context, st *engine.Stack) (*secrets.Bundle, error) {
	_, outs, err := st.OutputsInClear(ctx, gate.TypeTalosSecrets)
	if err != nil {
		return nil, err
	}
	ms, ok := outs["machineSecrets"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("stack %q: the secrets bundle has no machineSecrets output", st.Name())
	}
	return secretsbundle.FromState(ms)
}

// certLifetimes are the stack's client certificates and CAs, as `milner
// status` shows them; what cannot be read says why.
func certLifetimes(ctx context.Context, st *engine.Stack) []certs.Cert {
	outs, err := st.Outputs(ctx, true)
	if err != nil {
		return []certs.Cert{{Name: "certificates", Err: err.Error()}}
	}
	talos, _ := outs[talosconfig.output].(string)
	kube, _ := outs[kubeconfig.output].(string)
	bundle, err := stackBundle(ctx, st)
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
func renewClient(ctx context.Context, st *engine.Stack, output, raw string) (string, error) {
	bundle, err := stackBundle(ctx, st)
	if err != nil {
		return "", fmt.Errorf("renew the %s client certificate: %w", output, err)
	}
	return renewers[output](raw, bundle)
}
