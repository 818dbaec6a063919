package main

import (
	"errors"
	"fmt"
	"github.com/milner/milner/internal/pipeline"
	"os"
	"strings"
	"syscall"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
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
	f.addJSON(cmd)
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
			backup, err := o.St.ReadBackup(o.Ctx, id)
			if err != nil {
				return err
			}
			current, err := o.Resources()
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
				o.St.Name(), id, len(backup.Resources), only, len(ids), changed)
			if err := o.Confirm("Replace the stack's state with this backup?"); err != nil {
				return err
			}
			if err := o.St.Restore(o.Ctx, id); err != nil {
				return err
			}
			fmt.Printf("milner state restore: done; run `milner preview --stack %s` to see how reality differs from the restored state\n", o.St.Name())
			return nil
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
			locks, err := o.St.Locks(o.Ctx)
			if err != nil {
				return err
			}
			return emit(f.json, locks, func() { printLocks(o.St.Name(), locks) }, nil)
		}),
	}
	f.addStack(cmd, false)
	f.addJSON(cmd)
	return cmd
}

// printLocks prints the holders of a stack's locks.
func printLocks(stack string, locks []engine.Holder) {
	fmt.Printf("stack %q: %d locks held\n", stack, len(locks))
	for _, l := range locks {
		fmt.Printf("  %-7s %s: %s pid %d since %s %s\n", l.Lock, l.Where, l.Who, l.PID, l.Since.Format("2006-01-02 15:04:05Z"), l.Command)
	}
}

func stateUnlockCmd() *cobra.Command {
	f := &stackFlags{}
	cmd := &cobra.Command{
		Use:   "unlock",
		Short: "Clear the stale locks of a stack whose holder is gone (after a crash)",
		Long: `unlock clears the locks an interrupted or crashed run left: the backend's
update locks (as 'pulumi cancel' does) and, on PostgreSQL, the session
still holding Milner's advisory lock. It refuses while a live milner on
this host holds Milner's lock. Check with 'milner state locks' that the
holder is gone first: clearing a live run's lock lets a second run write
the same state.`,
		Example: `  milner state locks --stack dev
  milner state unlock --stack dev          # asks for the stack name; --yes in scripts`,
		RunE: f.run(false, func(o *pipeline.Op) error {
			locks, err := o.St.Locks(o.Ctx)
			if err != nil {
				return err
			}
			if len(locks) == 0 {
				fmt.Printf("stack %q: no locks held; nothing to clear\n", o.St.Name())
				return nil
			}
			host, _ := os.Hostname()
			for _, l := range locks {
				if l.PID > 0 && strings.HasSuffix(l.Who, "@"+host) && processAlive(l.PID) {
					return refused("%s lock %s is held by pid %d on this host, which is running (%s); nothing was cleared", l.Lock, l.Where, l.PID, l.Command)
				}
			}
			printLocks(o.St.Name(), locks)
			if err := o.Confirm("Clear these locks?"); err != nil {
				return err
			}
			if err := o.St.ClearStaleLocks(o.Ctx, locks); err != nil {
				return err
			}
			fmt.Printf("milner state unlock: cleared %d locks of stack %q\n", len(locks), o.St.Name())
			return nil
		}),
	}
	f.addStack(cmd, false)
	f.addYes(cmd)
	return cmd
}

// processAlive reports whether a process of this host runs under pid.
func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM)
}
