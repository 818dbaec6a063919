//go:build integration

package integration

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/milner/milner/internal/engine"
)

// pgTable splits a postgresURL into the server's DSN and the state table.
func pgTable(url string) (dsn, table string) {
	i := strings.LastIndex(url, "&table=")
	return url[:i], url[i+len("&table="):]
}

// poolExists is the event both lock tests act at: the up has begun to
// change the host.
func poolExists(s *milnerScenario) bool {
	_, err := virshOut("pool-info", s.cluster)
	return err == nil
}

// TestLostLock: on PostgreSQL, the session holding Milner's advisory lock
// is ended (pg_terminate_backend, as an idle_session_timeout, a failover or
// a pooler would end it) while `milner up` runs, once the storage pool
// exists. The up stops at its next state write with the lost-lock message
// and writes nothing after the session ended (every state row's
// updated_at, on the server's clock, is older than the termination), and
// neither the backend's lock nor Milner's is left behind.
func TestLostLock(t *testing.T) {
	s := newMilnerScenarioOn(t, "m-lklost", 81, postgresURL(t, "milner_it_lklost"))
	dsn, table := pgTable(s.url)
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()

	var ended time.Time
	r := s.actWhen(poolExists, func(pid int) error {
		// advisoryLock names its session "milner <pid> <who> <command>".
		var n int
		err := db.QueryRow(`SELECT count(pg_terminate_backend(pid, 5000)), clock_timestamp() FROM pg_stat_activity
			WHERE application_name LIKE $1`, fmt.Sprintf("milner %d %%", pid)).Scan(&n, &ended)
		if err == nil && n != 1 {
			err = fmt.Errorf("ended %d sessions of milner %d, want its lock's one", n, pid)
		}
		return err
	}, "up", "--yes")
	if r.code == 0 || !strings.Contains(r.stderr, engine.ErrLockLost.Error()) {
		t.Fatalf("up whose lock was lost: exit %d, want a failure naming %q:\n%s", r.code, engine.ErrLockLost, r.out())
	}
	rows, err := db.Query(fmt.Sprintf(`SELECT key, updated_at FROM %s WHERE updated_at > $1 AND key NOT LIKE '%%.pulumi/locks/%%'`, table), ended)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var key string
		var at time.Time
		_ = rows.Scan(&key, &at)
		t.Errorf("%s written at %s, after the lock's session ended at %s", key, at.Format(time.RFC3339Nano), ended.Format(time.RFC3339Nano))
	}
	s.requireNoLocks()
}

// TestStaleLockUnlock: on PostgreSQL, `milner up` killed (SIGKILL: no
// cleanup at all) once the pool exists leaves the backend's lock behind;
// `milner state locks` names it with the dead pid; `milner state unlock`
// from a non-terminal is refused naming --yes; `unlock --yes` clears it,
// and then the stack has no lock.
func TestStaleLockUnlock(t *testing.T) {
	s := newMilnerScenarioOn(t, "m-lkstale", 82, postgresURL(t, "milner_it_lkstale"))
	var killed int
	r := s.actWhen(poolExists, func(pid int) error {
		killed = pid
		return syscall.Kill(-pid, syscall.SIGKILL)
	}, "up", "--yes")
	// The engine starts its plugins in their own process groups: a SIGKILLed
	// milner leaves them running, holding every descriptor they inherited
	// (a `flock` around the test run included). This scenario's only.
	_ = exec.Command("pkill", "-KILL", "-f", s.dir+"/.tools/bin/pulumi-resource-").Run()
	t.Logf("killed up: exit %d", r.code)
	var locks []engine.Holder
	if err := json.Unmarshal([]byte(s.mustMilner("state", "locks", "--json").stdout), &locks); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range locks {
		found = found || (l.Lock == "backend" && l.PID == killed)
	}
	if !found {
		t.Fatalf("state locks after a killed up: %+v, want the backend's lock of pid %d", locks, killed)
	}
	refused(t, "unlock without --yes", s.milner("state", "unlock"), "--yes")
	s.mustMilner("state", "unlock", "--yes")
	if err := json.Unmarshal([]byte(s.mustMilner("state", "locks", "--json").stdout), &locks); err != nil {
		t.Fatal(err)
	}
	if len(locks) != 0 {
		t.Errorf("locks after unlock: %+v", locks)
	}
	s.requireNoLocks()
}
