package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gocloud.dev/gcerrors"
)

// Holder is one lock held on the stack, and who holds it.
type Holder struct {
	// Lock is "backend" (the DIY backend's update lock, which `pulumi` takes
	// too) or "milner" (Milner's own operation lock, lock.go).
	Lock string `json:"lock,omitempty"`
	// Where is the lock's object: a backend key, a file, an advisory lock.
	Where string `json:"where,omitempty"`
	// Who is user@host, and PID the process (on that host).
	Who string `json:"who,omitempty"`
	PID int    `json:"pid,omitempty"`
	// Since is when it was taken.
	Since time.Time `json:"since,omitzero"`
	// Command is the milner command holding it ("" for the backend's lock).
	Command string `json:"command,omitempty"`
	// Session is the PostgreSQL backend pid of the session holding
	// Milner's advisory lock (0 for other locks).
	Session int `json:"session,omitempty"`
}

// Here reports whether the lock was taken by a process of this host.
func (h Holder) Here() bool {
	host, _ := os.Hostname()
	return strings.HasSuffix(h.Who, "@"+host)
}

// RunningHere reports whether the lock's holder is a process of this host
// that still runs: a process of its pid that started no later than the
// lock was taken. A pid handed to a new process since (the holder died
// and the pid came round again) is not the holder.
func (h Holder) RunningHere() bool {
	if h.PID <= 0 || !h.Here() || !processAlive(h.PID) {
		return false
	}
	started, ok := processStart(h.PID)
	return !ok || h.Since.IsZero() || !started.After(h.Since.Add(time.Second))
}

// processAlive reports whether a process of this host runs under pid.
func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM)
}

// userHZ is the unit of /proc's clock-tick fields: USER_HZ, which Linux
// fixes at 100 for user space on every architecture Milner runs on (x86-64,
// arm64; proc(5), "(22) starttime ... expressed in clock ticks").
const userHZ = 100

// processStart is when the process pid of this host started: its stat's
// starttime (clock ticks after boot, proc(5)) after /proc/stat's btime.
func processStart(pid int) (time.Time, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}, false
	}
	// The command name (field 2) is in parentheses and may hold blanks:
	// the fields after the last ')' start with field 3.
	i := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(fields) < 20 {
		return time.Time{}, false
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	boot, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(boot), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			if btime, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return time.Unix(btime, 0).Add(time.Duration(ticks) * time.Second / userHZ), true
			}
		}
	}
	return time.Time{}, false
}

// Mine reports whether h is the lock this Stack holds (Lock): Milner's
// own, taken by this process.
func (s *Stack) Mine(h Holder) bool {
	if h.Lock != "milner" {
		return false
	}
	if h.Session != 0 {
		return s.check.holding() && h.Session == s.check.held()
	}
	return h.PID == os.Getpid() && h.Who == s.self().Who
}

// self describes this process as a lock holder: what Milner writes about
// itself into its lock.
func (s *Stack) self() Holder {
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		who += "@" + h
	}
	return Holder{Who: who, PID: os.Getpid(), Since: time.Now().UTC(), Command: s.command}
}

// Locks lists the locks held on the stack: the backend's update locks
// (pkg/v3 backend/diy/lock.go writes pid, user, host and time into each)
// and Milner's own, with the holder it recorded.
func (s *Stack) Locks(ctx context.Context) ([]Holder, error) {
	out, err := s.backendLocks(ctx)
	if err != nil {
		return nil, err
	}
	m, err := s.milnerHolder(ctx)
	if err != nil {
		return nil, err
	}
	if m != nil {
		out = append(out, *m)
	}
	return out, nil
}

// backendLocks reads the DIY backend's lock objects of this stack.
func (s *Stack) backendLocks(ctx context.Context) ([]Holder, error) {
	b, err := s.openBucket(ctx)
	if err != nil {
		return nil, fmt.Errorf("stack %q: locks: %w", s.name, err)
	}
	defer func() { _ = b.Close() }()
	suffix := "/" + s.project.Name.String() + "/" + s.name + "/"
	var out []Holder
	err = eachKey(ctx, b, ".pulumi/locks/", func(key string) {
		if !strings.HasSuffix(path.Dir(key)+"/", suffix) || path.Ext(key) != ".json" {
			return
		}
		h := Holder{Lock: "backend", Where: key}
		if raw, err := b.ReadAll(ctx, key); err == nil {
			var c struct {
				Pid       int       `json:"pid"`
				Username  string    `json:"username"`
				Hostname  string    `json:"hostname"`
				Timestamp time.Time `json:"timestamp"`
			}
			if json.Unmarshal(raw, &c) == nil {
				h.Who, h.PID, h.Since = c.Username+"@"+c.Hostname, c.Pid, c.Timestamp
			}
		}
		out = append(out, h)
	})
	if err != nil {
		return nil, fmt.Errorf("stack %q: locks: %w", s.name, err)
	}
	return out, nil
}

// milnerHolder returns Milner's lock's holder, or nil when it is free.
func (s *Stack) milnerHolder(ctx context.Context) (*Holder, error) {
	switch {
	case strings.HasPrefix(s.url, "file://"):
		p, err := s.flockPath()
		if err != nil {
			return nil, err
		}
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		defer func() { _ = f.Close() }()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
			return nil, nil // free: closing the file releases the probe
		}
		h := &Holder{}
		if raw, err := io.ReadAll(f); err == nil && json.Unmarshal(raw, h) != nil {
			h = &Holder{}
		}
		h.Lock, h.Where = "milner", p
		return h, nil
	case strings.HasPrefix(s.url, "postgres://"):
		db, err := sql.Open("postgres", s.lockDSN(""))
		if err != nil {
			return nil, err
		}
		defer func() { _ = db.Close() }()
		row := db.QueryRowContext(ctx, `SELECT l.pid, coalesce(a.application_name, ''), coalesce(a.backend_start, now())
			FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE `+advisoryLockRow, advisoryLockArgs(s.advisoryKey())...)
		h := &Holder{Lock: "milner", Where: fmt.Sprintf("PostgreSQL advisory lock %q", s.lockKey())}
		var app string
		switch err := row.Scan(&h.Session, &app, &h.Since); {
		case errors.Is(err, sql.ErrNoRows):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("stack %q: locks: %w", s.name, err)
		}
		// "milner <pid> <user@host> <command>", as advisoryLock names it.
		if f := strings.SplitN(app, " ", 4); len(f) >= 3 && f[0] == "milner" {
			h.PID, _ = strconv.Atoi(f[1])
			h.Who = f[2]
			if len(f) == 4 {
				h.Command = f[3]
			}
		} else {
			h.Who = app
		}
		return h, nil
	}
	return nil, nil
}

// ClearStaleLocks removes exactly the locks named: each of the backend's
// update locks by its key (what `pulumi cancel` deletes, pkg/v3 diy
// CancelCurrentUpdate, but only those listed: a lock taken since is left),
// and, on PostgreSQL, Milner's advisory lock by ending the session that
// holds it (pg_terminate_backend). The caller holds Milner's lock when it
// can be taken.
func (s *Stack) ClearStaleLocks(ctx context.Context, stale []Holder) error {
	ctx = engineContext(ctx)
	for _, h := range stale {
		switch {
		case h.Lock == "backend":
			if err := s.deleteBackendLock(ctx, h.Where); err != nil {
				return fmt.Errorf("stack %q: clear the backend's lock %s: %w", s.name, h.Where, err)
			}
		case h.Lock == "milner" && h.Session != 0:
			db, err := sql.Open("postgres", s.lockDSN(""))
			if err != nil {
				return err
			}
			var ok bool
			err = db.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", h.Session).Scan(&ok)
			_ = db.Close()
			if err != nil || !ok {
				return fmt.Errorf("stack %q: end the PostgreSQL session %d that holds Milner's lock: %w (a superuser or the session's own role may)", s.name, h.Session, err)
			}
		}
	}
	return nil
}

// deleteBackendLock deletes one of the stack's backend lock objects; one
// already gone is no error.
func (s *Stack) deleteBackendLock(ctx context.Context, key string) error {
	suffix := "/" + s.project.Name.String() + "/" + s.name + "/"
	if !strings.HasPrefix(key, ".pulumi/locks/") || !strings.HasSuffix(path.Dir(key)+"/", suffix) {
		return fmt.Errorf("%s is not a lock of this stack", key)
	}
	b, err := s.openBucket(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	if err := b.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return err
	}
	return nil
}

// flockPath is the file of Milner's lock on a file backend.
func (s *Stack) flockPath() (string, error) {
	dir, err := fileStateDir(s.url)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, ".pulumi", "locks", "milner", s.name+".flock"), nil
}
