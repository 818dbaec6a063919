package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/etcdbackup"
	"github.com/milner/milner/internal/pipeline"
)

// etcdCmd is `milner etcd snapshot|inspect`: the cluster's etcd kept
// outside the cluster, age-encrypted, and checked.
func etcdCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Snapshot the cluster's etcd to an age-encrypted file, check such a file, restore one after etcd lost quorum",
	}
	cmd.AddCommand(etcdSnapshotCmd(), etcdInspectCmd(), etcdRestoreCmd())
	return cmd
}

func etcdSnapshotCmd() *cobra.Command {
	f := &stackFlags{}
	var in pipeline.EtcdSnapshotInput
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Stream an etcd snapshot from a healthy control plane, verify it, and write it age-encrypted (0600)",
		Long: `snapshot checks its flags first (the recipients, and --out: a file that
exists is refused without --force), then dials the stack's control planes,
in milner:nodes order, with the talosconfig in the state, and streams etcd's
snapshot (Talos' EtcdSnapshot, as 'talosctl etcd snapshot') from the first
whose etcd member answers its status without errors. The snapshot is held in
memory only, verified as talosctl and etcdutl do (etcd's sha256 trailer, then
bbolt's integrity check, revision, hash and keys), and written age-encrypted
for the recipients: a tar of meta.json (cluster, stack, node, UTC time,
revision, hash, keys, sha256) and db.snapshot, etcd's own file. The default
name is <cluster>-etcd-<UTC time>-rev<revision>.snapshot.age in --out (a
directory; default: the current one). It never writes the clear snapshot to
disk, and a failed run leaves no file. Check a file with 'milner etcd
inspect'; the schedule and the restore: docs/runbooks/backup.md.`,
		Example: `  milner etcd snapshot --stack dev --recipient age1... --out ~/backups/
  milner etcd snapshot --stack prod --recipients-file ~/.config/milner/recipients.txt --json`,
		RunE: f.run(false, func(o *pipeline.Op) error {
			res, err := pipeline.EtcdSnapshot(o, in)
			if err != nil {
				return err
			}
			return emit(f.json, res, func() {
				for _, s := range res.Skipped {
					fmt.Printf("milner etcd: skipped %s\n", s)
				}
				fmt.Printf("milner etcd: wrote %s, age-encrypted, 0600; keep it off the cluster's hosts\n  ", res.Path)
				res.Write(os.Stdout)
			}, nil)
		}),
	}
	f.addStack(cmd, false)
	cmd.Flags().StringVarP(&in.Out, "out", "o", "", "the file to write, or a directory for the default name (default: the current directory)")
	cmd.Flags().BoolVar(&in.Force, "force", false, "replace the --out file if it exists")
	cmd.Flags().StringArrayVar(&in.Recipients, "recipient", nil, "an age public key (age1..., from age-keygen) that may decrypt it (repeatable)")
	cmd.Flags().StringArrayVar(&in.RecipientsFiles, "recipients-file", nil, "a file of age public keys, one a line, as age -R reads it (repeatable)")
	cmd.Flags().StringVar(&in.Talosconfig, "talosconfig", "", "talosconfig file (default: the stack state's, else $TALOSCONFIG or ~/.talos/config)")
	cmd.MarkFlagsOneRequired("recipient", "recipients-file")
	return cmd
}

func etcdInspectCmd() *cobra.Command {
	var identity string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect <file>",
		Short: "Decrypt an etcd snapshot file into memory, verify it, and print what it holds",
		Long: `inspect decrypts a file 'milner etcd snapshot' wrote with an age key of one
of its recipients, into memory only, verifies the snapshot as the snapshot
verb did (etcd's sha256 trailer, bbolt's integrity check), and checks it is
the snapshot its meta.json recorded (revision, hash, sha256). It needs no
stack and no cluster: run it where the backups are kept, after each
snapshot or on a schedule; a backup never checked is not a backup.`,
		Example: `  milner etcd inspect ~/backups/milner-etcd-20261206T020000Z-rev4711.snapshot.age --identity ~/milner-dev.key`,
		Args:    cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			m, clear, err := etcdbackup.Open(args[0], identity)
			if err != nil {
				return err
			}
			_ = clear.Close()
			return emit(asJSON, m, func() {
				fmt.Printf("milner etcd: %s verified: ", args[0])
				m.Write(os.Stdout)
			}, nil)
		},
	}
	cmd.Flags().StringVarP(&identity, "identity", "i", "", "the age key file (AGE-SECRET-KEY-1...) of one of its recipients (required)")
	addJSON(cmd, &asJSON)
	_ = cmd.MarkFlagRequired("identity")
	return cmd
}

// etcdRestored is etcd restore's result (--json): the node whose etcd
// was bootstrapped from the file.
type etcdRestored struct {
	Stack string `json:"stack"`
	Node  string `json:"node"`
	From  string `json:"from"`
}

func etcdRestoreCmd() *cobra.Command {
	f := &stackFlags{}
	var in pipeline.EtcdRestoreInput
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Bootstrap etcd on one control plane from a snapshot file (Talos' disaster recovery); refused while etcd has quorum",
		Long: `restore decrypts --from with --identity into memory and verifies it as
'milner etcd inspect' does; the snapshot must be of the stack's cluster
(milner:cluster.name). It is refused while any control plane lists etcd's
members: etcd still has quorum, and a recover would start a second etcd
cluster. After your confirmation it uploads the snapshot to --node
(EtcdRecover) and bootstraps etcd there from it (Bootstrap with
recover_etcd), as Talos' disaster recovery does, then waits until that
member answers. The other control planes rejoin once their etcd data is
empty. docs/runbooks/backup.md has the whole procedure.`,
		Example: `  milner etcd restore --stack prod --from milner-etcd-20261206T020000Z-rev4711.snapshot.age --identity ~/milner-prod-etcd.key --node cp-1`,
		RunE: f.run(true, func(o *pipeline.Op) error {
			if err := pipeline.EtcdRestore(o, in); err != nil {
				return err
			}
			return emit(f.json, etcdRestored{Stack: o.St.Name(), Node: in.Node, From: in.From}, nil, nil)
		}),
	}
	f.addStack(cmd, true)
	f.addYes(cmd)
	cmd.Flags().StringVar(&in.From, "from", "", "the snapshot file 'milner etcd snapshot' wrote (required)")
	cmd.Flags().StringVarP(&in.Identity, "identity", "i", "", "the age key file (AGE-SECRET-KEY-1...) of one of its recipients (required)")
	cmd.Flags().StringVar(&in.Node, "node", "", "the control plane (milner:nodes[].name) that bootstraps etcd from it (required)")
	cmd.Flags().StringVar(&in.Talosconfig, "talosconfig", "", "talosconfig file (default: the stack state's, else $TALOSCONFIG or ~/.talos/config)")
	for _, name := range []string{"from", "identity", "node"} {
		_ = cmd.MarkFlagRequired(name)
	}
	_ = cmd.RegisterFlagCompletionFunc("node", completeNodes)
	return cmd
}
