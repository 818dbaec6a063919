//go:build integration

package integration

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"

	_ "github.com/lib/pq"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
)

// postgresURL is the team backend the tests use: the role and database
// scripts/ci-deps.sh creates (MILNER_IT_POSTGRES overrides it). Each
// scenario keeps its state in a table of its own.
func postgresURL(t *testing.T, table string) string {
	t.Helper()
	base := os.Getenv("MILNER_IT_POSTGRES")
	if base == "" {
		base = "postgres://milner_it:milner_it@127.0.0.1:5432/milner_it?sslmode=disable"
	}
	db, err := sql.Open("postgres", base)
	if err == nil {
		err = db.Ping()
		if err == nil {
			_, err = db.Exec("DROP TABLE IF EXISTS " + table)
		}
		_ = db.Close()
	}
	if err != nil {
		t.Fatalf("PostgreSQL at %s (run scripts/ci-deps.sh): %v", base, err)
	}
	return base + "&table=" + table
}

// TestConcurrentUps: on a file backend and on PostgreSQL, a stack brought up
// from empty previews no change; then two `milner up --yes --replace w-1`
// started together for one memory change end with exactly one applying and
// the other refused at once (exit 5, naming the other milner), and the
// stack previews no change after: nothing lost or half-written.
func TestConcurrentUps(t *testing.T) {
	for _, tc := range []struct {
		name   string
		subnet int
		url    func(t *testing.T) string
	}{
		{"file", 26, func(*testing.T) string { return "" }},
		{"postgres", 27, func(t *testing.T) string { return postgresURL(t, "milner_it_conc") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newMilnerScenarioOn(t, "m-conc-"+tc.name, tc.subnet, tc.url(t))
			s.mustMilner("up", "--yes")
			s.mustMilner("preview", "--expect-no-changes")
			before := s.uuids()

			s.nodes[1].Memory = 1536
			s.writeStackFile()
			var wg sync.WaitGroup
			results := make([]cmdResult, 2)
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = s.milner("up", "--yes", "--replace", "w-1")
				}()
			}
			wg.Wait()
			var applied, refusedN int
			for _, r := range results {
				switch {
				case r.code == 0 && strings.Contains(r.out(), "replace"):
					applied++
				case r.code == exitRefused && strings.Contains(r.out(), "another milner"):
					refusedN++
				default:
					t.Errorf("unexpected outcome: exit %d:\n%s", r.code, r.out())
				}
			}
			if applied != 1 || refusedN != 1 {
				t.Fatalf("%d applied, %d refused; want exactly one of each", applied, refusedN)
			}
			s.mustMilner("preview", "--expect-no-changes")
			after := s.uuids()
			if after[s.domain("cp-1")] != before[s.domain("cp-1")] || after[s.domain("w-1")] == before[s.domain("w-1")] {
				t.Errorf("domains %v, were %v: want w-1 replaced once, cp-1 untouched", after, before)
			}
			if info := virsh(t, "dominfo", s.domain("w-1")); !strings.Contains(info, fmt.Sprint(1536*1024)+" KiB") {
				t.Errorf("w-1 does not have the new memory:\n%s", info)
			}
		})
	}
}

// exitRefused is milner's exit code for a refusal by a rule.
const exitRefused = 5

// TestStateRestore: on a file backend and on PostgreSQL, every update leaves
// a restorable copy of its checkpoint in the backend (`milner state
// backups`); restoring the one an earlier up left makes exactly that state
// current again (the domain ids it recorded), keeps the replaced state as a
// new backup, is refused without --yes from a non-terminal, and restoring
// that newest backup brings back a state that previews no change. Between
// the two, an up on the older state (which records w-1's replaced domain)
// is refused before any change, naming that domain.
func TestStateRestore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		subnet int
		url    func(t *testing.T) string
	}{
		{"file", 28, func(*testing.T) string { return "" }},
		{"postgres", 29, func(t *testing.T) string { return postgresURL(t, "milner_it_restore") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newMilnerScenarioOn(t, "m-bak-"+tc.name, tc.subnet, tc.url(t))
			backups := func() []engine.Backup {
				t.Helper()
				var out []engine.Backup
				if err := json.Unmarshal([]byte(s.mustMilner("state", "backups", "--json").stdout), &out); err != nil {
					t.Fatal(err)
				}
				return out
			}
			s.mustMilner("up", "--yes")
			first := s.stateIDs(gate.TypeLibvirtDomain)
			afterFirst := backups()
			if len(afterFirst) == 0 {
				t.Fatal("no backup after an up")
			}

			s.nodes[1].Memory = 1536
			s.writeStackFile()
			s.mustMilner("up", "--yes", "--replace", "w-1")
			second := s.stateIDs(gate.TypeLibvirtDomain)
			if maps.Equal(first, second) {
				t.Fatalf("w-1 was not replaced: domains %v before and after", second)
			}
			afterSecond := backups()
			if len(afterSecond) <= len(afterFirst) {
				t.Fatalf("%d backups after the second up, %d after the first", len(afterSecond), len(afterFirst))
			}

			older := afterFirst[0].ID
			refused(t, "restore without --yes", s.milner("state", "restore", "--backup", older), "--yes")
			if got := s.stateIDs(gate.TypeLibvirtDomain); !maps.Equal(got, second) {
				t.Fatalf("a refused restore changed state: %v, was %v", got, second)
			}

			s.mustMilner("state", "restore", "--backup", older, "--yes")
			if got := s.stateIDs(gate.TypeLibvirtDomain); !maps.Equal(got, first) {
				t.Errorf("after restoring backup %s the state's domains are %v, want the first up's %v", older, got, first)
			}
			// The restored state records w-1's old domain; libvirt holds its
			// replacement: the identity guard refuses the next up before any
			// change, naming the stale domain (guard.Stale).
			live := s.uuids()
			r := s.milner("up", "--yes")
			refused(t, "up on a state older than the host", r, fmt.Sprintf("domain %q", s.domain("w-1")), "restored from an older backup")
			if r.code != exitRefused {
				t.Errorf("up on a state older than the host: exit %d, want %d", r.code, exitRefused)
			}
			if got := s.uuids(); !maps.Equal(got, live) {
				t.Errorf("the refused up changed the domains: %v, were %v", got, live)
			}
			if got := s.stateIDs(gate.TypeLibvirtDomain); !maps.Equal(got, first) {
				t.Errorf("the refused up changed the state: %v, want %v", got, first)
			}
			kept := backups()
			if len(kept) != len(afterSecond)+1 {
				t.Fatalf("%d backups after a restore, %d before: the replaced state was not kept", len(kept), len(afterSecond))
			}

			s.mustMilner("state", "restore", "--backup", "latest", "--yes")
			if got := s.stateIDs(gate.TypeLibvirtDomain); !maps.Equal(got, second) {
				t.Errorf("after restoring the kept state the domains are %v, want %v", got, second)
			}
			s.mustMilner("preview", "--expect-no-changes")
		})
	}
}
