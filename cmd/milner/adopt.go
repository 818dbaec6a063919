package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
)

func adoptCmd() *cobra.Command {
	f := &stackFlags{}
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
			refusals, err := secretsBundleRefusals(o, res.Steps)
			if err == nil {
				err = refuseList(refusals, "", "adopting %s would create a new cluster secrets bundle beside the cluster's nodes (see above); %s is unchanged", what, file)
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
	v, err := viewLibvirt(o, res.Steps)
	if err != nil {
		return "", nil, err
	}
	a, notAdopted := guard.Adopt(o.st.Name(), v.declared, v.inState, v.live)
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
