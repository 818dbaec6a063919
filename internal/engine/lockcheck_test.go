package engine

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
)

// testPostgres is the database scripts/ci-deps.sh makes (MILNER_IT_POSTGRES
// overrides it), with table as the state table, emptied.
func testPostgres(t *testing.T, table string) (*sql.DB, string) {
	t.Helper()
	base := os.Getenv("MILNER_IT_POSTGRES")
	if base == "" {
		base = "postgres://milner_it:milner_it@127.0.0.1:5432/milner_it?sslmode=disable"
	}
	db, err := sql.Open("postgres", base)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Ping(); err != nil {
		t.Skipf("no PostgreSQL at %s (scripts/ci-deps.sh starts it; make ci runs it first): %v", base, err)
	}
	_, err = db.Exec("DROP TABLE IF EXISTS " + table)
	require.NoError(t, err)
	return db, base + "&table=" + table
}

// TestLockLostBetweenCheckAndWriteWritesNothing kills the lock's session
// after the write was checked and before it is written, and lets another
// session take the lock, as another milner would: the write fails with
// ErrLockLost and nothing reaches the table, for a state write and for a
// backup copy. (With the check made only before the write, both land.)
func TestLockLostBetweenCheckAndWriteWritesNothing(t *testing.T) {
	ctx := context.Background()
	db, url := testPostgres(t, "milner_lockgap")
	const key = int64(0x6d696c6e65720001)
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	var ok bool
	var pid int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1), pg_backend_pid()", key).Scan(&ok, &pid))
	require.True(t, ok)
	check := &lockCheck{stack: "gap"}
	check.hold(conn, key, "milner/test/gap", pid)
	b, err := blob.OpenBucket(ctx, checkedURL(url, check))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, b.WriteAll(ctx, "stacks/gap.json", []byte(`{"v":1}`), nil), "written while the lock is held")

	w, err := b.NewWriter(ctx, "stacks/gap.json", nil)
	require.NoError(t, err)
	// gocloud makes the driver's writer, where the lock is checked, once
	// 512 bytes have come to sniff their type: a checkpoint is larger.
	_, err = w.Write([]byte(`{"v":2,"pad":"` + strings.Repeat("x", 1024) + `"}`))
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "SELECT pg_terminate_backend($1)", pid)
	require.NoError(t, err)
	var taken bool
	require.Eventually(t, func() bool {
		return db.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&taken) == nil && taken
	}, 10*time.Second, 50*time.Millisecond, "another session takes the lock")
	err = w.Close()
	assert.True(t, errors.Is(err, ErrLockLost), "the write after the lock was lost: %v", err)
	err = b.Copy(ctx, "stacks/gap.json.bak", "stacks/gap.json", nil)
	assert.True(t, errors.Is(err, ErrLockLost), "the backup copy: %v", err)

	got, err := b.ReadAll(ctx, "stacks/gap.json")
	require.NoError(t, err)
	assert.JSONEq(t, `{"v":1}`, string(got), "the state is what the lock's holder last wrote")
	exists, err := b.Exists(ctx, "stacks/gap.json.bak")
	require.NoError(t, err)
	assert.False(t, exists, "no backup was copied")
}

// TestAdvisoryLockRefusedOnASessionThatHoldsIt: advisory locks are
// re-entrant per server session, so a second milner that a transaction
// pooler hands the holder's session would take the lock again and both
// would run. milner takes it in one statement that refuses (NULL) when the
// session already holds it, and says which session.
func TestAdvisoryLockRefusedOnASessionThatHoldsIt(t *testing.T) {
	ctx := context.Background()
	db, _ := testPostgres(t, "milner_lockreentry")
	const key = int64(0x6d696c6e65720002)
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	session, took, err := tryAdvisoryLock(ctx, conn, key)
	require.NoError(t, err)
	require.True(t, took.Valid && took.Bool, "the first take")
	var pid int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	assert.Equal(t, pid, session, "the holder's backend pid is recorded")

	// The same server session, as a pooler would hand it to the next client.
	again, took, err := tryAdvisoryLock(ctx, conn, key)
	require.NoError(t, err)
	assert.Equal(t, session, again)
	assert.False(t, took.Valid, "a session that holds the lock does not take it again (pg_try_advisory_lock alone says true)")
	var plain bool
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&plain))
	assert.True(t, plain, "what the bare call answers on that session: the re-entry this rule refuses")

	other, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	_, took, err = tryAdvisoryLock(ctx, other, key)
	require.NoError(t, err)
	assert.True(t, took.Valid && !took.Bool, "another session is refused as before")
}

// TestWriteOnAnotherSessionThatHoldsTheLockIsRefused: behind a pooler the
// statements of one client connection can run on another server session.
// The lock's holder lost its session, another milner took the lock on a
// second session, and the pooler now runs the first milner's write there:
// "this statement's session holds the lock" is true, but it is not the
// session that took it for this milner. The write checks the recorded
// backend pid and is refused.
func TestWriteOnAnotherSessionThatHoldsTheLockIsRefused(t *testing.T) {
	ctx := context.Background()
	db, url := testPostgres(t, "milner_locksession")
	const key = int64(0x6d696c6e65720003)
	mine, err := db.Conn(ctx)
	require.NoError(t, err)
	session, took, err := tryAdvisoryLock(ctx, mine, key)
	require.NoError(t, err)
	require.True(t, took.Valid && took.Bool)
	check := &lockCheck{stack: "session"}
	check.hold(mine, key, "milner/test/session", session)
	b, err := blob.OpenBucket(ctx, checkedURL(url, check))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, b.WriteAll(ctx, "stacks/s.json", []byte(`{"v":1}`), nil), "written on the session that took the lock")

	_, err = db.ExecContext(ctx, "SELECT pg_terminate_backend($1)", session)
	require.NoError(t, err)
	theirs, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = theirs.Close() })
	require.Eventually(t, func() bool {
		_, took, err := tryAdvisoryLock(ctx, theirs, key)
		return err == nil && took.Valid && took.Bool
	}, 10*time.Second, 50*time.Millisecond, "another milner takes the lock on its own session")
	check.mu.Lock()
	check.conn = theirs // the pooler runs this milner's statements on the other session
	check.mu.Unlock()

	err = b.WriteAll(ctx, "stacks/s.json", []byte(`{"v":2,"pad":"`+strings.Repeat("x", 1024)+`"}`), nil)
	assert.True(t, errors.Is(err, ErrLockLost), "a write on a session that holds the lock but did not take it for this milner: %v", err)
	got, err := b.ReadAll(ctx, "stacks/s.json")
	require.NoError(t, err)
	assert.JSONEq(t, `{"v":1}`, string(got))
}
