package main

import (
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/spf13/cobra"
)

// stateCmd is `milner state backups|restore`: the checkpoint copies the
// backend keeps after every update, and putting one back.
func stateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "List the state backups the backend keeps after every update, or restore one",
	}
	cmd.AddCommand(stateBackupsCmd(), stateRestoreCmd())
	return cmd
}

func stateBackupsCmd() *cobra.Command {
	f := &stackFlags{}
	cmd := &cobra.Command{
		Use:     "backups",
		Short:   "List the stack's state backups, newest first",
		Example: `  milner state backups --stack dev`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop, st, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer stop()
			backups, err := st.Backups(ctx)
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(os.Stdout, backups)
			}
			fmt.Printf("stack %q: %d backups in %s (newest first)\n", st.Name(), len(backups), st.Backend())
			for _, b := range backups {
				fmt.Printf("  %s  %s  %d resources\n", b.ID, b.Time.Format("2006-01-02 15:04:05Z"), b.Resources)
			}
			return nil
		},
	}
	f.addStack(cmd)
	f.addJSON(cmd)
	return cmd
}

func stateRestoreCmd() *cobra.Command {
	f := &stackFlags{}
	var id string
	var yes bool
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Make a state backup the stack's state again (the current state is kept as a backup first)",
		Long: `restore replaces the stack's state with one of its backups, under Milner's
stack lock and the backend's own import. It changes no infrastructure. The
state it replaces is kept as a new backup first, so a restore can be undone
the same way. Afterwards 'milner preview' shows how reality differs from
the restored state; docs/runbooks/state.md.`,
		Example: `  milner state backups --stack dev
  milner state restore --stack dev --backup 1764561234567890123`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop, st, err := f.openLocked(cmd)
			if err != nil {
				return err
			}
			defer stop()
			backup, err := st.ReadBackup(ctx, id)
			if err != nil {
				return err
			}
			current, err := st.Resources(ctx)
			if err != nil {
				return err
			}
			// What the restore changes, by URN: resources only one side
			// has, and resources whose provider id differs (e.g. a domain
			// replaced since the backup).
			ids := map[resource.URN]string{}
			for _, r := range current {
				ids[r.URN] = r.ID
			}
			var only, changed int
			for _, r := range backup.Resources {
				id, ok := ids[r.URN]
				switch {
				case !ok:
					only++
				case id != string(r.ID):
					changed++
				}
				delete(ids, r.URN)
			}
			fmt.Printf("milner state restore: stack %q from backup %s: %d resources; %d only in the backup, %d only in the current state, %d with another id; the current state is kept as a new backup first\n",
				st.Name(), id, len(backup.Resources), only, len(ids), changed)
			if !yes {
				if err := confirm(os.Stdin, os.Stdout, "Replace the stack's state with this backup?", st.Name(), "--yes"); err != nil {
					return err
				}
			}
			if err := st.Restore(ctx, id); err != nil {
				return err
			}
			fmt.Printf("milner state restore: done; run `milner preview --stack %s` to see how reality differs from the restored state\n", st.Name())
			return nil
		},
	}
	f.addStack(cmd)
	cmd.Flags().StringVar(&id, "backup", "", "the backup id from `milner state backups`, or latest (required)")
	cmd.Flags().BoolVar(&yes, "yes", false, "restore without the typed confirmation (the stack name)")
	_ = cmd.MarkFlagRequired("backup")
	return cmd
}
