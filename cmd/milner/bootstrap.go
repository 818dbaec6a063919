package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"time"

	sidx509 "github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
)

// etcdAskTimeout bounds asking the control planes for etcd members (at
// once: a dead node costs it once).
const etcdAskTimeout = 15 * time.Second

// bundleTalosconfig is a talosconfig for the declared control planes with
// the admin client certificate of the secrets bundle in state (the
// <cluster>-secrets clientConfiguration output: base64 PEM, as
// terraform-provider-talos v0.10.1 writes it and reads it back in
// talosClientTFConfigToTalosClientConfig). It errors when the state holds
// no bundle.
func bundleTalosconfig(o *op, d upgrade.Declared) (*clientconfig.Config, error) {
	_, outs, err := o.st.OutputsInClear(o.ctx, gate.TypeTalosSecrets)
	if err != nil {
		return nil, err
	}
	cc, _ := outs["clientConfiguration"].(map[string]any)
	var pem [3][]byte
	for i, k := range []string{"caCertificate", "clientCertificate", "clientKey"} {
		s, _ := cc[k].(string)
		if pem[i], err = base64.StdEncoding.DecodeString(s); err != nil || s == "" {
			return nil, fmt.Errorf("stack %q: the secrets bundle's clientConfiguration.%s is not base64 PEM", o.st.Name(), k)
		}
	}
	var endpoints []string
	for _, n := range d.Nodes {
		endpoints = append(endpoints, n.Endpoint)
	}
	return clientconfig.NewConfig(o.cfg.Cluster.Name, endpoints, pem[0], &sidx509.PEMEncodedCertificateAndKey{Crt: pem[1], Key: pem[2]}), nil
}

// bootstrapState is what Milner knows of a stack's bootstrap.
type bootstrapState struct {
	// InState: the state holds <cluster>-bootstrap.
	InState bool
	// Recorded: the stack file sets milner:cluster.adoptBootstrap.
	Recorded bool
	// Etcd is the control planes' answer (asked only when neither).
	Etcd upgrade.Etcd
}

// askBootstrap says whether the stack's cluster was bootstrapped: by its
// state, its stack file's record, or else by asking the control planes for
// etcd members with the bundle's client certificate. A stack that does not
// declare the Talos layer is never asked (ok false). The error is a missing
// bundle: nothing on an adopted cluster's Talos layer can go on without it.
func askBootstrap(o *op) (b bootstrapState, ok bool, err error) {
	cfg, err := o.config()
	if err != nil || !cfg.Declares(config.LayerTalos) {
		return b, false, err
	}
	b.Recorded = cfg.Cluster.AdoptBootstrap
	inState, err := o.find(gate.TypeTalosBootstrap, "")
	if err != nil {
		return b, false, err
	}
	if b.InState = inState != nil; b.InState || b.Recorded {
		return b, true, nil
	}
	d := upgrade.FromConfig(cfg)
	tc, err := bundleTalosconfig(o, d)
	if err != nil {
		return b, false, refused("%v: the stack declares the Talos layer, so its nodes can be managed only with the cluster's own secrets bundle; import it first: `milner secrets import --stack %s --in <bundle.age> --identity <key.txt>` (docs/runbooks/adopt.md says where an adopted cluster's bundle comes from)", err, o.st.Name())
	}
	b.Etcd = upgrade.AskEtcd(o.ctx, tc, d, etcdAskTimeout)
	return b, true, nil
}

// bootstrapRefusals applies gate.CheckBootstrap, asking the control
// planes only when the preview could bootstrap a second time.
func bootstrapRefusals(o *op, steps []gate.Step) ([]gate.Refusal, error) {
	if !gate.BootstrapNeedsAsking(steps) {
		return nil, nil
	}
	b, ok, err := askBootstrap(o)
	if err != nil || !ok {
		return nil, err
	}
	return gate.CheckBootstrap(steps, b.Etcd.Bootstrapped(), b.Etcd.String(), o.st.Name()), nil
}

// recordBootstrap records milner:cluster.adoptBootstrap in the stack file
// when the cluster's control planes list etcd members and neither its state
// nor its file knows the bootstrap, and says what it found. before is the
// file's previous bytes when it wrote (nil otherwise).
func recordBootstrap(o *op) (before []byte, err error) {
	b, ok, err := askBootstrap(o)
	switch {
	case err != nil || !ok || b.InState || b.Recorded:
		return nil, err
	case !b.Etcd.Bootstrapped():
		fmt.Fprintf(os.Stderr, "milner adopt: no bootstrap recorded: %s; the next up bootstraps etcd (VMs alone are no evidence: a crash can leave the VMs of a cluster that never was)\n", b.Etcd)
		return nil, nil
	}
	if before, err = stackfile.SetClusterFlag(o.st.File(), "adoptBootstrap"); err != nil {
		return nil, err
	}
	fmt.Printf("milner adopt: the cluster was bootstrapped (%s): recorded milner:cluster.adoptBootstrap, so the next up imports <cluster>-bootstrap instead of bootstrapping again\n", b.Etcd)
	return before, nil
}
