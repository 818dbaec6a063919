package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/stackfile"
)

func adoptCmd() *cobra.Command {
	f := &stackFlags{}
	var node, id string
	cmd := &cobra.Command{
		Use:   "adopt",
		Short: "Record an existing VM's id for a node (imported by the next up) and show that the adoption replaces nothing",
		Long: `adopt is the one thin adoption helper the seeds allow. It records the VM's
id as the node's adoptId in Pulumi.<stack>.yaml (the program turns it into
the import option), previews, and keeps the record only if the preview
replaces and deletes nothing. The next 'milner up' imports the VM.`,
		Example: `  milner adopt --stack dev --node cp-2 --id "$(virsh domuuid milner-dev-cp-2)"
  milner adopt --stack prod --node cp-1 --id pve-1/301`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop, st, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer stop()
			file := st.File()
			before, err := stackfile.SetNodeField(file, node, "adoptId", id)
			if err != nil {
				return err
			}
			// Anything but a clean adoption restores the stack file as it was.
			restore := func(cause error) error {
				if werr := os.WriteFile(file, before, 0o644); werr != nil {
					return errors.Join(cause, fmt.Errorf("restore %s: %w", file, werr))
				}
				return cause
			}
			res, err := st.Preview(ctx, false)
			if err != nil {
				return restore(err)
			}
			cfg, err := st.Config()
			if err != nil {
				return restore(err)
			}
			gate.NewReport(res.Steps, clusterName(cfg)).Write(os.Stdout)
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
				return restore(refused("adopting node %q with id %s would plan %v; the VM's shape differs from the node's config (fix the config or the VM, then adopt again); %s is unchanged", node, id, bad, file))
			case !imported:
				fmt.Printf("milner adopt: node %q is already in the state of stack %q; recorded id %s in %s (no import needed)\n", node, st.Name(), id, file)
			default:
				fmt.Printf("milner adopt: node %q will be imported (id %s) by the next `milner up --stack %s`; the preview plans no replace and no delete. Recorded in %s: commit it.\n", node, id, st.Name(), file)
			}
			return nil
		},
	}
	f.addStack(cmd)
	cmd.Flags().StringVar(&node, "node", "", "the node whose VM already exists (required)")
	cmd.Flags().StringVar(&id, "id", "", "the VM's id: libvirt domain UUID (virsh domuuid) or Proxmox <pve-node>/<vmid> (required)")
	_ = cmd.MarkFlagRequired("node")
	_ = cmd.MarkFlagRequired("id")
	_ = cmd.RegisterFlagCompletionFunc("node", completeNodes)
	return cmd
}
