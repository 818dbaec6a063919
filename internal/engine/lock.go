package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	_ "github.com/lib/pq" // the PostgreSQL driver the DIY backend itself links
)

// ErrLocked is returned by Lock when another milner holds the stack.
var ErrLocked = errors.New("stack is locked by another milner operation")

// Lock takes Milner's own lock on the stack for an operation that changes
// it, held from its guard and gated preview through its apply, and returns
// the function that releases it. The DIY backend's lock is only taken by
// the update itself and is check-write-check, not atomic: two concurrent
// ups can both fail, and the preview of the second runs against a state the
// first is changing. So Milner serializes whole operations:
//   - file://: flock(2) on <dir>/.pulumi/locks/milner/<stack>.flock, which
//     the kernel releases if the process dies;
//   - postgres://: a session-level pg_try_advisory_lock on a connection held
//     for the operation, which the server releases if the connection drops;
//   - other backends: only the backend's own lock.
//
// A held lock is ErrLocked at once: a second `milner up` never waits.
func (s *Stack) Lock(ctx context.Context) (func(), error) {
	switch {
	case strings.HasPrefix(s.url, "file://"):
		return s.flock()
	case strings.HasPrefix(s.url, "postgres://"):
		return s.advisoryLock(ctx)
	default:
		return func() {}, nil
	}
}

// lockKey names the stack's lock, the same for every client of the backend.
func (s *Stack) lockKey() string { return "milner/" + s.project.Name.String() + "/" + s.name }

func (s *Stack) flock() (func(), error) {
	path, err := s.flockPath()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("stack %q: lock: %w", s.name, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("stack %q: lock: %w", s.name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("stack %q: %w (%s)", s.name, ErrLocked, path)
		}
		return nil, fmt.Errorf("stack %q: lock: %w", s.name, err)
	}
	// Who holds it, for `milner state locks`: written only once held.
	if rec, err := json.Marshal(s.self()); err == nil {
		_ = f.Truncate(0)
		_, _ = f.WriteAt(rec, 0)
	}
	return func() { _ = f.Close() }, nil // closing releases the flock
}

// lockDSN is the backend URL as a lib/pq connection string: without the
// DIY backend's own table parameter, with application_name set to app
// (pg_stat_activity shows it: who holds the advisory lock).
func (s *Stack) lockDSN(app string) string {
	u, err := url.Parse(s.url)
	if err != nil {
		return s.url
	}
	q := u.Query()
	q.Del("table") // the DIY backend's own parameter, unknown to the server
	if app != "" {
		q.Set("application_name", app)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// advisoryKey is the stack's advisory lock id: 64 bits of its lock key.
func (s *Stack) advisoryKey() int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s.lockKey()))
	return int64(h.Sum64()) //nolint:gosec // a lock id: any 64 bits do
}

// tryAdvisoryLock takes the advisory lock on key in one statement on
// conn's session and returns that session's backend pid. took is NULL when
// the session already holds the lock: pg_try_advisory_lock would succeed
// again (session-level advisory locks are re-entrant: PostgreSQL docs,
// "Advisory Locks"), and a second milner behind a transaction pooler that
// was handed the holder's session would hold it too. CASE evaluates the
// call only when the condition is false.
func tryAdvisoryLock(ctx context.Context, conn *sql.Conn, key int64) (session int, took sql.NullBool, err error) {
	err = conn.QueryRowContext(ctx, `SELECT pg_backend_pid(), CASE WHEN `+heldBySession+` THEN NULL ELSE pg_try_advisory_lock($3) END`,
		append(advisoryLockArgs(key), key)...).Scan(&session, &took)
	return session, took, err
}

func (s *Stack) advisoryLock(ctx context.Context) (func(), error) {
	me := s.self()
	// pg_stat_activity shows it; the server cuts it at NAMEDATALEN-1 (63).
	app := fmt.Sprintf("milner %d %s %s", me.PID, me.Who, me.Command)
	if len(app) > 63 {
		app = app[:63]
	}
	db, err := sql.Open("postgres", s.lockDSN(app))
	if err != nil {
		return nil, fmt.Errorf("stack %q: lock: %w", s.name, err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("stack %q: lock: %w", s.name, err)
	}
	key := s.advisoryKey()
	session, took, err := tryAdvisoryLock(ctx, conn, key)
	if err == nil && !took.Valid {
		err = fmt.Errorf("stack %q: %w (PostgreSQL advisory lock %q): the server session this connection was given (backend pid %d) already holds it, "+
			"so another client shares that session: a transaction- or statement-pooling proxy (PgBouncer pool_mode=transaction) hands one session to several clients, "+
			"and advisory locks are re-entrant per session; connect milner to PostgreSQL directly or through a session-pooling proxy (docs/backends.md)",
			s.name, ErrLocked, s.lockKey(), session)
	}
	if err == nil && !took.Bool {
		err = fmt.Errorf("stack %q: %w (PostgreSQL advisory lock %q)", s.name, ErrLocked, s.lockKey())
	}
	if err != nil {
		_ = conn.Close()
		_ = db.Close()
		if !errors.Is(err, ErrLocked) {
			err = fmt.Errorf("stack %q: lock: %w", s.name, err)
		}
		return nil, err
	}
	s.check.hold(conn, key, s.lockKey(), session)
	return func() {
		s.check.release()
		_, _ = conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock($1)", key)
		_ = conn.Close()
		_ = db.Close()
	}, nil
}
