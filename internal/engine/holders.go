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
	// session is the PostgreSQL backend pid of an advisory lock's session.
	session int
}

// RunningHere reports whether the lock's holder is a process of this host
// that still runs: its lock is not stale.
func (h Holder) RunningHere() bool {
	host, _ := os.Hostname()
	return h.PID > 0 && strings.HasSuffix(h.Who, "@"+host) && processAlive(h.PID)
}

// processAlive reports whether a process of this host runs under pid.
func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM)
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
		switch err := row.Scan(&h.session, &app, &h.Since); {
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

// ClearStaleLocks removes the backend's update locks of the stack (as
// `pulumi cancel` does, pkg/v3 diy CancelCurrentUpdate) and, on
// PostgreSQL, ends the session that holds a stale Milner advisory lock
// (pg_terminate_backend). The caller holds Milner's lock when it can be
// taken; it returns what it cleared.
func (s *Stack) ClearStaleLocks(ctx context.Context, stale []Holder) error {
	ctx = engineContext(ctx)
	for _, h := range stale {
		switch {
		case h.Lock == "backend":
			if err := s.backend.CancelCurrentUpdate(ctx, s.ref); err != nil {
				return fmt.Errorf("stack %q: clear the backend's lock: %w", s.name, err)
			}
		case h.Lock == "milner" && h.session != 0:
			db, err := sql.Open("postgres", s.lockDSN(""))
			if err != nil {
				return err
			}
			var ok bool
			err = db.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", h.session).Scan(&ok)
			_ = db.Close()
			if err != nil || !ok {
				return fmt.Errorf("stack %q: end the PostgreSQL session %d that holds Milner's lock: %w (a superuser or the session's own role may)", s.name, h.session, err)
			}
		}
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
