package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/tests/ptytest"
)

// unlockStack is a project "locktest" with stack "dev" on a file backend
// in a temp directory: the stack as `milner state unlock` opens it, and
// the directory the backend's lock objects live in.
type unlockStack struct {
	dir, locks string
}

func newUnlockStack(t *testing.T) unlockStack {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"Pulumi.yaml": "name: locktest\nruntime: go\n", "Pulumi.dev.yaml": "config: {}\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	return unlockStack{dir: dir, locks: filepath.Join(dir, "state", ".pulumi", "locks", "organization", "locktest", "dev")}
}

// open opens the stack as a milner command does.
func (u unlockStack) open(t *testing.T) *engine.Stack {
	t.Helper()
	st, err := engine.Open(t.Context(), engine.Options{Stack: "dev", Dir: u.dir, Backend: "file://" + filepath.Join(u.dir, "state"),
		Passphrase: "correct horse battery staple 42", Program: func(*pulumi.Context) error { return nil }, Progress: io.Discard})
	require.NoError(t, err)
	return st
}

// backendLock writes a lock object as the DIY backend writes its own
// (pkg/v3 backend/diy/lock.go lockContent), for a holder pid on host at since.
func (u unlockStack) backendLock(t *testing.T, id string, pid int, host string, since time.Time) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(u.locks, 0o700))
	b, err := json.Marshal(map[string]any{"pid": pid, "username": "op", "hostname": host, "timestamp": since})
	require.NoError(t, err)
	path := filepath.Join(u.locks, id+".json")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

func (u unlockStack) remaining(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(u.locks)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e.Name(), ".json"))
	}
	return out
}

// deadPID is a pid no process of this host has.
func deadPID(t *testing.T) int {
	for pid := 4_000_000; pid > 3_000_000; pid -= 7919 {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); errors.Is(err, os.ErrNotExist) {
			return pid
		}
	}
	t.Skip("no free pid found")
	return 0
}

// TestUnlockNeedsForceForAHolderThatMayRun: a lock whose holder is gone
// is cleared after the confirmation; one whose holder may still be
// running is refused without --force: a live process of this host (the
// same pid, started before the lock was taken) and a holder on another
// host. A pid that came round to a process started after the lock was
// taken is not the holder.
func TestUnlockNeedsForceForAHolderThatMayRun(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	longAgo := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		pid    func(t *testing.T) int
		host   string
		since  time.Time
		force  bool
		refuse string // "" clears it
	}{
		{"a dead holder of this host", deadPID, host, time.Now(), false, ""},
		{"a live holder of this host", func(*testing.T) int { return os.Getpid() }, host, time.Now().Add(time.Minute), false,
			"backend lock " + ".pulumi/locks/organization/locktest/dev/l.json is held by pid"},
		{"a live holder of this host, forced", func(*testing.T) int { return os.Getpid() }, host, time.Now().Add(time.Minute), true, ""},
		{"a pid that came round since the lock was taken", func(*testing.T) int { return os.Getpid() }, host, longAgo, false, ""},
		{"a holder on another host", deadPID, "elsewhere.example", time.Now(), false, "is held by op@elsewhere.example pid"},
		{"a holder on another host, forced", deadPID, "elsewhere.example", time.Now(), true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUnlockStack(t)
			u.backendLock(t, "l", c.pid(t), c.host, c.since)
			var out bytes.Buffer
			err := Unlock(&Op{Ctx: t.Context(), St: u.open(t), Out: &out, Yes: true}, c.force)
			if c.refuse == "" {
				require.NoError(t, err, out.String())
				assert.Empty(t, u.remaining(t), "cleared")
				return
			}
			var r *Refusal
			require.True(t, errors.As(err, &r), "want a refusal, got %v", err)
			assert.Contains(t, err.Error(), c.refuse)
			assert.Equal(t, []string{"l"}, u.remaining(t), "nothing was cleared")
		})
	}
}

// TestUnlockActsOnTheLocksListedAfterThePrompt: unlock holds Milner's lock
// while it asks (no other milner starts meanwhile), and clears only what
// it lists after the answer: a lock taken while it asked makes it refuse
// and clear nothing.
func TestUnlockActsOnTheLocksListedAfterThePrompt(t *testing.T) {
	u := newUnlockStack(t)
	host, err := os.Hostname()
	require.NoError(t, err)
	u.backendLock(t, "stale", deadPID(t), host, time.Now())
	master, tty := ptytest.Open(t)
	st := u.open(t)
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- Unlock(&Op{Ctx: t.Context(), St: st, Out: out, In: tty}, false) }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "Type the stack name") }, 20*time.Second, 20*time.Millisecond, "the prompt")

	other := u.open(t)
	_, err = other.Lock(context.Background())
	assert.True(t, errors.Is(err, engine.ErrLocked), "another milner while unlock asks: %v", err)
	u.backendLock(t, "new", os.Getpid(), host, time.Now()) // a run that started meanwhile
	_, err = master.WriteString("dev\n")
	require.NoError(t, err)

	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("unlock did not return")
	}
	var r *Refusal
	require.True(t, errors.As(err, &r), "want a refusal, got %v", err)
	assert.Contains(t, err.Error(), "changed while you were asked")
	assert.ElementsMatch(t, []string{"stale", "new"}, u.remaining(t), "nothing was cleared")
	release, err := other.Lock(context.Background())
	require.NoError(t, err, "unlock released Milner's lock")
	release()
}

// TestUnlockRefusesMilnersLockHeldByAnotherRun: Milner's own lock held by
// another run is that run's: refused, and on a file backend --force
// cannot take it either (the kernel holds the flock for a live process).
func TestUnlockRefusesMilnersLockHeldByAnotherRun(t *testing.T) {
	u := newUnlockStack(t)
	holder := u.open(t)
	release, err := holder.Lock(context.Background())
	require.NoError(t, err)
	t.Cleanup(release)
	for _, force := range []bool{false, true} {
		var out bytes.Buffer
		err := Unlock(&Op{Ctx: t.Context(), St: u.open(t), Out: &out, Yes: true}, force)
		var r *Refusal
		require.True(t, errors.As(err, &r), "force=%v: want a refusal, got %v", force, err)
		if force {
			assert.Contains(t, err.Error(), "a file lock that the kernel holds for a running process")
		} else {
			assert.Contains(t, err.Error(), "is held by another run, which is running")
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
