package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	sidx509 "github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
)

func adoptCmd() *cobra.Command {
	run := &stacks.RunOptions{}
	f := &stackFlags{program: stacks.NewProgram(run)}
	var node, id string
	var holder, all, bootstrap bool
	cmd := &cobra.Command{
		Use:   "adopt",
		Short: "Record existing objects' ids (one node's VM, or --all) for the next up to import, and show that the adoption replaces nothing",
		Long: `adopt is the one thin adoption helper the seeds allow. It records the VM's
id as the node's adoptId in Pulumi.<stack>.yaml (the program turns it into
the import option), previews, and keeps the record only if the preview
replaces and deletes nothing. The next 'milner up' imports the VM.

With --all (libvirt) it records every live object of the stack that its
state lacks: each domain as its node's adoptId, the pool, network and
volumes under milner:substrate.libvirt.adopt by logical name. That is how a
stack whose state was lost takes its machines and disks back
(docs/runbooks/recover.md). Another stack's objects (owner tag, pool path)
and shut-off domains are refused, never adopted.

On a stack that starts at the apps layer (milner:startAt apps), --all
adopts what the apps layer declares and the cluster already runs: each Helm
release Helm records in the declared namespace from the declared chart, and
each Namespace, Secret, ResourceQuota, LimitRange, PriorityClass,
StorageClass and OIDC binding by name. It imports them into the state at
once, under the stack lock, with no Helm upgrade, and previews: a release
whose live version or values differ from the stack shows as an update. A
release of the same name from another chart is refused, naming both charts,
and nothing is changed.

Every adoption of a stack that declares the Talos layer also records the
cluster's bootstrap when its state lacks it: Milner asks the control
planes, through the Talos API with the client certificate of the secrets
bundle in state, for etcd's members (talosctl etcd members); if one lists
members, milner:cluster.adoptBootstrap is set and the next up imports
<cluster>-bootstrap (a state-only record) instead of bootstrapping etcd a
second time. Live VMs alone are no evidence. Without the bundle in state
the adoption is refused: run 'milner secrets import' first. --bootstrap
records only that (e.g. after the gate refused a second bootstrap).`,
		Example: `  milner adopt --stack dev --node cp-2 --id "$(virsh domuuid milner-dev-cp-2)"
  milner adopt --stack dev --all
  milner adopt --stack prod --node cp-1 --id 301
  milner adopt --stack prod --node cp-1 --id 1301 --holder
  milner adopt --stack dev --bootstrap`,
		RunE: f.run(false, func(o *op) error {
			file := o.st.File()
			var before []byte
			var err error
			what := fmt.Sprintf("node %q", node)
			switch {
			case bootstrap:
				what, id = "the bootstrap", stacks.BootstrapImportID
			case all:
				what = "the live objects"
				if done, err := adoptApps(o, run); err != nil || done {
					return err
				}
				if id, before, err = adoptAll(o); err != nil || before == nil {
					return err
				}
			default:
				field := "adoptId"
				if holder {
					field = "holderAdoptId"
				}
				if before, err = stackfile.SetNodeField(file, node, field, id); err != nil {
					return err
				}
			}
			// Anything but a clean adoption restores the stack file as it was.
			restore := func(cause error) error {
				if before == nil {
					return cause
				}
				if werr := os.WriteFile(file, before, 0o644); werr != nil {
					return errors.Join(cause, fmt.Errorf("restore %s: %w", file, werr))
				}
				return cause
			}
			// The cluster-level Talos record: the bootstrap, by evidence.
			wrote, err := recordBootstrap(o)
			switch {
			case err != nil:
				return restore(err)
			case before == nil && wrote == nil:
				return refused("nothing to record: the state of stack %q holds its bootstrap, the stack file records it, or no control plane lists etcd members (see above)", o.st.Name())
			case before == nil:
				before = wrote
			}
			res, err := o.st.Preview(o.ctx, false)
			if err != nil {
				return restore(err)
			}
			cfg, err := o.config()
			if err != nil {
				return restore(err)
			}
			gate.NewReport(res.Steps, cfg.Cluster.Name).Write(os.Stdout)
			// The bundle rule weighs the libvirt host's live node VMs too.
			var view *substrateView
			if cfg.Substrate.Kind == config.KindLibvirt && cfg.Declares(config.LayerSubstrate) {
				view, err = viewSubstrate(o, res.Steps)
			}
			if err == nil {
				err = refuseList(gate.CheckSecretsBundle(res.Steps, liveNodeVMs(view), o.st.Name()), "",
					"adopting %s would create a new cluster secrets bundle beside the cluster's nodes (see above); %s is unchanged", what, file)
			}
			if err != nil {
				return restore(err)
			}
			var bad []string
			imported := false
			for _, s := range res.Steps {
				switch s.Op {
				case apitype.OpImport:
					imported = true
				case apitype.OpReplace, apitype.OpCreateReplacement, apitype.OpDeleteReplaced, apitype.OpDelete, apitype.OpImportReplacement:
					bad = append(bad, fmt.Sprintf("%s %s", s.Op, s.URN))
				}
			}
			switch {
			case len(bad) > 0:
				return restore(refused("adopting %s (%s) would plan %v; the live objects differ from the config (fix the config or the objects, then adopt again); %s is unchanged", what, id, bad, file))
			case !imported:
				fmt.Printf("milner adopt: %s already in the state of stack %q; recorded %s in %s (no import needed)\n", what, o.st.Name(), id, file)
			default:
				fmt.Printf("milner adopt: %s will be imported (%s) by the next `milner up --stack %s`; the preview plans no replace and no delete. Recorded in %s: commit it.\n", what, id, o.st.Name(), file)
			}
			return nil
		}),
	}
	f.addStack(cmd, false)
	cmd.Flags().StringVar(&node, "node", "", "the node whose VM already exists (with --id)")
	cmd.Flags().StringVar(&id, "id", "", "the VM's id: libvirt domain UUID (virsh domuuid) or Proxmox VM id (with --node)")
	cmd.Flags().BoolVar(&holder, "holder", false, "Proxmox: the id is the node's disk holder VM (vmId + 1000), recorded as holderAdoptId")
	cmd.Flags().BoolVar(&bootstrap, "bootstrap", false, "record only the cluster's bootstrap (asks the control planes for etcd members)")
	cmd.Flags().BoolVar(&all, "all", false, "libvirt: adopt every live object of the stack that its state lacks (recovery from lost state)")
	// One of: --node with --id (and --holder), --all, or --bootstrap.
	cmd.MarkFlagsOneRequired("node", "all", "bootstrap")
	cmd.MarkFlagsRequiredTogether("node", "id")
	for _, one := range []string{"node", "id", "holder"} {
		cmd.MarkFlagsMutuallyExclusive(one, "all", "bootstrap")
	}
	_ = cmd.RegisterFlagCompletionFunc("node", completeNodes)
	return cmd
}

// adoptAll records every live libvirt object of the stack that its state
// lacks in the stack file: each domain as its node's adoptId, the pool,
// network and volumes under milner:substrate.libvirt.adopt. before is the
// file's previous bytes (nil when there was nothing to adopt); what it
// recorded is said in recorded.
func adoptAll(o *op) (recorded string, before []byte, err error) {
	cfg, err := o.config()
	if err != nil {
		return "", nil, err
	}
	if cfg.Substrate.Kind != config.KindLibvirt || !cfg.Declares(config.LayerSubstrate) {
		return "", nil, refused("adopt --all reads a libvirt host; on Proxmox adopt each node with --node/--id and --holder (docs/runbooks/adopt.md)")
	}
	// What the stack declares is what its preview declares.
	res, err := o.st.Preview(o.ctx, false)
	if err != nil {
		return "", nil, err
	}
	v, err := viewSubstrate(o, res.Steps)
	if err != nil {
		return "", nil, err
	}
	a, notAdopted := guard.Adopt(o.st.Name(), v.declared, v.state, v.live)
	if err := refuseList(notAdopted, "", "%d live objects cannot be adopted (see above); %s is unchanged", len(notAdopted), o.st.File()); err != nil {
		return "", nil, err
	}
	if len(a.Nodes)+len(a.Objects) == 0 {
		fmt.Printf("milner adopt: every live object of stack %q is in its state or already recorded; nothing to adopt\n", o.st.Name())
		return "", nil, nil
	}
	before, err = stackfile.SetAdoption(o.st.File(), a.Nodes, a.Objects)
	return fmt.Sprintf("%d domains, %d pools, networks and volumes", len(a.Nodes), len(a.Objects)), before, err
}

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
