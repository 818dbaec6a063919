package main

import (
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/stacks"
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
members, milner:cluster.adoptBootstrap is set and the program declares
no <cluster>-bootstrap, so no up bootstraps etcd a second time. Live VMs alone are no evidence. Without the bundle in state
the adoption is refused: run 'milner secrets import' first. --bootstrap
records only that (e.g. after the gate refused a second bootstrap).`,
		Example: `  milner adopt --stack dev --node cp-2 --id "$(virsh domuuid milner-dev-cp-2)"
  milner adopt --stack dev --all
  milner adopt --stack prod --node cp-1 --id 301
  milner adopt --stack prod --node cp-1 --id 1301 --holder
  milner adopt --stack dev --bootstrap`,
		// Under Milner's lock: adopt writes the stack file (and, for the apps
		// layer, the state) and previews what it wrote.
		RunE: f.run(true, func(o *pipeline.Op) error {
			return f.gated(o, pipeline.Adopt(), pipeline.Input{RunOpts: run, Adopt: pipeline.AdoptInput{Node: node, ID: id, Holder: holder, All: all, Bootstrap: bootstrap}})
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
