package pipeline

import (
	"fmt"
	"io"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/internal/engine"
)

// RestoreState is `milner state restore`: it says what putting backup id
// back changes, asks, and makes the backup the stack's state (the state it
// replaces is kept as a new backup first). It changes no infrastructure.
func RestoreState(o *Op, id string) error {
	backup, err := o.St.ReadBackup(o.Ctx, id)
	if err != nil {
		return err
	}
	current, err := o.Resources()
	if err != nil {
		return err
	}
	only, onlyCurrent, changed := restoreDelta(current, backup.Resources)
	_, _ = fmt.Fprintf(o.Out, "milner state restore: stack %q from backup %s: %d resources; %d only in the backup, %d only in the current state, %d with another id; the current state is kept as a new backup first\n",
		o.St.Name(), id, len(backup.Resources), only, onlyCurrent, changed)
	if err := o.Confirm("Replace the stack's state with this backup?"); err != nil {
		return err
	}
	if err := o.St.Restore(o.Ctx, id); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(o.Out, "milner state restore: done; run `milner preview --stack %s` to see how reality differs from the restored state\n", o.St.Name())
	return nil
}

// restoreDelta is what restoring backup over current changes, by URN:
// resources only one side has, and resources whose provider id differs
// (e.g. a domain replaced since the backup).
func restoreDelta(current []engine.Resource, backup []apitype.ResourceV3) (onlyBackup, onlyCurrent, changed int) {
	ids := map[resource.URN]string{}
	for _, r := range current {
		ids[r.URN] = r.ID
	}
	for _, r := range backup {
		id, ok := ids[r.URN]
		switch {
		case !ok:
			onlyBackup++
		case id != string(r.ID):
			changed++
		}
		delete(ids, r.URN)
	}
	return onlyBackup, len(ids), changed
}

// Unlock is `milner state unlock`: it clears the stack's stale locks
// after asking, and refuses while a live process of this host holds one.
func Unlock(o *Op) error {
	locks, err := o.St.Locks(o.Ctx)
	if err != nil {
		return err
	}
	if len(locks) == 0 {
		_, _ = fmt.Fprintf(o.Out, "stack %q: no locks held; nothing to clear\n", o.St.Name())
		return nil
	}
	for _, l := range locks {
		if l.RunningHere() {
			return Refused("%s lock %s is held by pid %d on this host, which is running (%s); nothing was cleared", l.Lock, l.Where, l.PID, l.Command)
		}
	}
	WriteLocks(o.Out, o.St.Name(), locks)
	if err := o.Confirm("Clear these locks?"); err != nil {
		return err
	}
	if err := o.St.ClearStaleLocks(o.Ctx, locks); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(o.Out, "milner state unlock: cleared %d locks of stack %q\n", len(locks), o.St.Name())
	return nil
}

// WriteLocks prints the holders of a stack's locks.
func WriteLocks(w io.Writer, stack string, locks []engine.Holder) {
	_, _ = fmt.Fprintf(w, "stack %q: %d locks held\n", stack, len(locks))
	for _, l := range locks {
		_, _ = fmt.Fprintf(w, "  %-7s %s: %s pid %d since %s %s\n", l.Lock, l.Where, l.Who, l.PID, l.Since.Format("2006-01-02 15:04:05Z"), l.Command)
	}
}
