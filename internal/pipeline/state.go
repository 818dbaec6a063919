package pipeline

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

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

// Unlock is `milner state unlock`: under Milner's own lock (no other
// milner starts while it works), it lists the locks others hold on the
// stack, asks, lists them again and clears exactly those, refusing if the
// list changed while it asked. A holder that may still run needs force:
// one of this host whose process runs (the same pid, started before the
// lock), one of another host (milner cannot tell whether it runs), and
// Milner's own lock held by another run (a live process or PostgreSQL
// session holds it by definition).
func Unlock(o *Op, force bool) error {
	release, err := lockForUnlock(o, force)
	if err != nil {
		return err
	}
	defer release()
	locks, err := othersLocks(o)
	if err != nil {
		return err
	}
	if len(locks) == 0 {
		_, _ = fmt.Fprintf(o.Out, "stack %q: no locks held; nothing to clear\n", o.St.Name())
		return nil
	}
	if err := mayClear(locks, force); err != nil {
		return err
	}
	WriteLocks(o.Out, o.St.Name(), locks)
	if err := o.Confirm("Clear these locks?"); err != nil {
		return err
	}
	// What is cleared is what is held now, and only if it is what was shown.
	now, err := othersLocks(o)
	if err != nil {
		return err
	}
	if !sameLocks(locks, now) {
		WriteLocks(o.Out, o.St.Name(), now)
		return Refused("the locks of stack %q changed while you were asked (now as above); nothing was cleared: run `milner state unlock --stack %s` again", o.St.Name(), o.St.Name())
	}
	if err := o.St.ClearStaleLocks(o.Ctx, now); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(o.Out, "milner state unlock: cleared %d locks of stack %q\n", len(now), o.St.Name())
	return nil
}

// lockForUnlock takes Milner's lock for unlock. Held by another run, it
// is that run's: refused without force; with force, on PostgreSQL, the
// session holding it is ended first (a file backend's flock belongs to a
// live process: only stopping that process frees it).
func lockForUnlock(o *Op, force bool) (func(), error) {
	release, err := o.St.Lock(o.Ctx)
	if !errors.Is(err, engine.ErrLocked) {
		return release, err
	}
	held, lerr := o.St.Locks(o.Ctx)
	if lerr != nil {
		return nil, errors.Join(err, lerr)
	}
	var milner []engine.Holder
	for _, h := range held {
		if h.Lock == "milner" {
			milner = append(milner, h)
		}
	}
	WriteLocks(o.Out, o.St.Name(), milner)
	switch {
	case !force:
		return nil, Refused("Milner's lock of stack %q is held by another run, which is running (a live process or PostgreSQL session holds it; as above); nothing was cleared. "+
			"Let it finish, or stop it; if it is stuck, `milner state unlock --force` ends its PostgreSQL session", o.St.Name())
	case len(milner) == 0 || milner[0].Session == 0:
		return nil, Refused("Milner's lock of stack %q is a file lock that the kernel holds for a running process (as above): stop that process (pid %d); --force cannot take it", o.St.Name(), firstPID(milner))
	}
	_, _ = fmt.Fprintf(o.Out, "milner state unlock: --force: ending the PostgreSQL session %d that holds Milner's lock\n", milner[0].Session)
	if err := o.St.ClearStaleLocks(o.Ctx, milner); err != nil {
		return nil, err
	}
	// The server releases the lock as the session ends.
	for range 50 {
		if release, err = o.St.Lock(o.Ctx); !errors.Is(err, engine.ErrLocked) {
			return release, err
		}
		select {
		case <-o.Ctx.Done():
			return nil, o.Ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, err
}

func firstPID(hs []engine.Holder) int {
	if len(hs) == 0 {
		return 0
	}
	return hs[0].PID
}

// othersLocks lists the stack's locks but the one this run holds.
func othersLocks(o *Op) ([]engine.Holder, error) {
	all, err := o.St.Locks(o.Ctx)
	if err != nil {
		return nil, err
	}
	var out []engine.Holder
	for _, h := range all {
		if !o.St.Mine(h) {
			out = append(out, h)
		}
	}
	return out, nil
}

// mayClear refuses, without force, a lock whose holder may still run: a
// process of this host that runs (engine.Holder.RunningHere), or a holder
// on another host, whose processes milner cannot see.
func mayClear(locks []engine.Holder, force bool) error {
	if force {
		return nil
	}
	for _, l := range locks {
		switch {
		case l.RunningHere():
			return Refused("%s lock %s is held by pid %d on this host, which is running (%s); nothing was cleared (--force clears it anyway)", l.Lock, l.Where, l.PID, l.Command)
		case !l.Here():
			return Refused("%s lock %s is held by %s pid %d on another host, which may be running; nothing was cleared: ask there, then `milner state unlock --force`", l.Lock, l.Where, l.Who, l.PID)
		}
	}
	return nil
}

// sameLocks reports whether two lists name the same locks and holders.
func sameLocks(a, b []engine.Holder) bool {
	return slices.EqualFunc(a, b, func(x, y engine.Holder) bool {
		return x.Lock == y.Lock && x.Where == y.Where && x.Who == y.Who && x.PID == y.PID && x.Session == y.Session && x.Since.Equal(y.Since)
	})
}

// WriteLocks prints the holders of a stack's locks.
func WriteLocks(w io.Writer, stack string, locks []engine.Holder) {
	_, _ = fmt.Fprintf(w, "stack %q: %d locks held\n", stack, len(locks))
	for _, l := range locks {
		session := ""
		if l.Session != 0 {
			session = fmt.Sprintf(" (PostgreSQL session %d)", l.Session)
		}
		_, _ = fmt.Fprintf(w, "  %-7s %s: %s pid %d%s since %s %s\n", l.Lock, l.Where, l.Who, l.PID, session, l.Since.Format("2006-01-02 15:04:05Z"), l.Command)
	}
}
