package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/pipeline"
)

// stateCmd is `milner state backups|restore`: the checkpoint copies the
// backend keeps after every update, and putting one back.
func stateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "List the state backups the backend keeps after every update, or restore one; show or clear stale locks",
	}
	cmd.AddCommand(stateBackupsCmd(), stateRestoreCmd(), stateLocksCmd(), stateUnlockCmd())
	return cmd
}

// restored is state restore's result (--json).
type restored struct {
	Stack  string `json:"stack"`
	Backup string `json:"backup"`
}

func stateBackupsCmd() *cobra.Command {
	f := &stackFlags{}
	cmd := &cobra.Command{
		Use:     "backups",
		Short:   "List the stack's state backups, newest first",
		Example: `  milner state backups --stack dev`,
		RunE: f.run(false, func(o *pipeline.Op) error {
			backups, err := o.St.Backups(o.Ctx)
			if err != nil {
				return err
			}
			return emit(f.json, backups, func() {
				fmt.Printf("stack %q: %d backups in %s (newest first)\n", o.St.Name(), len(backups), o.St.Backend())
				for _, b := range backups {
					fmt.Printf("  %s  %s  %d resources\n", b.ID, b.Time.Format("2006-01-02 15:04:05Z"), b.Resources)
				}
			}, nil)
		}),
	}
	f.addStack(cmd, false)
	return cmd
}

func stateRestoreCmd() *cobra.Command {
	f := &stackFlags{}
	var id string
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
		RunE: f.run(true, func(o *pipeline.Op) error {
			err := pipeline.RestoreState(o, id)
			if err != nil {
				return err
			}
			return emit(f.json, restored{Stack: o.St.Name(), Backup: id}, nil, nil)
		}),
	}
	f.addStack(cmd, true)
	cmd.Flags().StringVar(&id, "backup", "", "the backup id from 'milner state backups', or latest (required)")
	f.addYes(cmd)
	_ = cmd.MarkFlagRequired("backup")
	return cmd
}

func stateLocksCmd() *cobra.Command {
	f := &stackFlags{}
	cmd := &cobra.Command{
		Use:   "locks",
		Short: "Show the locks held on the stack and who holds them",
		Long: `locks lists the backend's update locks (the DIY backend's, which pulumi
takes too: pid, user, host, time) and Milner's own operation lock (the
milner command, pid, user@host and since when). It changes nothing.`,
		Example: `  milner state locks --stack dev`,
		RunE: f.run(false, func(o *pipeline.Op) error {
			locks, err := heldLocks(o)
			if err != nil {
				return err
			}
			return emit(f.json, locks, func() { pipeline.WriteLocks(os.Stdout, o.St.Name(), locks) }, nil)
		}),
	}
	f.addStack(cmd, false)
	return cmd
}

func stateUnlockCmd() *cobra.Command {
	f := &stackFlags{}
	var force bool
	cmd := &cobra.Command{
		Use:   "unlock",
		Short: "Clear the stale locks of a stack whose holder is gone (after a crash)",
		Long: `unlock clears the locks an interrupted or crashed run left: the backend's
update locks (those 'pulumi cancel' deletes) and, on PostgreSQL, the session
still holding Milner's advisory lock. It works under Milner's own lock, so
no other milner starts meanwhile; it lists the locks, asks, lists them again
and clears exactly those, refusing if they changed while it asked.

A holder that may still be running needs --force: a process of this host
that runs (the same pid, started before it took the lock: a pid handed to a
new process is not the holder), a holder on another host (milner cannot see
its processes), and Milner's own lock held by another run (on PostgreSQL
--force ends that run's session; a file backend's lock belongs to a live
process, which only stopping it frees). Check with 'milner state locks'
first: clearing a live run's lock lets a second run write the same state.`,
		Example: `  milner state locks --stack dev
  milner state unlock --stack dev          # asks for the stack name; --yes in scripts
  milner state unlock --stack dev --force  # the holder is on another host, or stuck`,
		RunE: f.run(false, func(o *pipeline.Op) error {
			if err := pipeline.Unlock(o, force); err != nil {
				return err
			}
			locks, err := heldLocks(o)
			return emit(f.json, locks, nil, err)
		}),
	}
	f.addStack(cmd, false)
	f.addYes(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "also clear a lock whose holder may still run: a live process here, a holder on another host, or (PostgreSQL) another run's session holding Milner's lock")
	return cmd
}

// heldLocks are the stack's locks (engine.Stack.Locks); none is an empty
// list, so --json prints [] rather than null.
func heldLocks(o *pipeline.Op) ([]engine.Holder, error) {
	locks, err := o.St.Locks(o.Ctx)
	if locks == nil {
		locks = []engine.Holder{}
	}
	return locks, err
}
