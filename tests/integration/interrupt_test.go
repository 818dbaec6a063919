//go:build integration

package integration

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMilnerInterrupt: SIGINT to `milner up`, as a terminal's Ctrl-C sends
// it (to milner's process group; Pulumi starts its plugins in groups of
// their own, sdk cmdutil.RegisterProcessGroup), at three points tied to
// what libvirt shows rather than to a delay, on a file backend and on
// PostgreSQL:
//   - pool: an up from empty state, once the storage pool exists;
//   - domain: an up from empty state, once the first domain exists;
//   - replace: `up --replace w-1` of a memory change, once w-1's old
//     domain has been deleted (delete-before-replace).
//
// After each: milner exits 8 (Pulumi's cancelled) and says it cancelled gracefully; the state
// records no pending operation and exactly what libvirt holds (pool,
// network, every volume and every domain by UUID: no orphan, no duplicate;
// a domain the interrupted replace deleted is recorded as pending
// replacement, pkg/v3's PendingReplacement, not as live); neither the
// backend's lock nor Milner's is left; the same command run again exits 0
// and recreates no volume (inodes kept), and a preview after it plans no
// change. (A plain `milner up` after an interrupted `--replace w-1` is
// refused by the gate, naming `--replace w-1`: the replace is still planned.)
func TestMilnerInterrupt(t *testing.T) {
	type point struct {
		name string
		// prepare runs before the interrupted up and returns its extra args.
		prepare func(s *milnerScenario) []string
		// reached reports the event the interrupt is tied to.
		reached func(s *milnerScenario) bool
	}
	var oldW1 string
	points := []point{
		{"pool", func(*milnerScenario) []string { return nil }, func(s *milnerScenario) bool {
			_, err := virshOut("pool-info", s.cluster)
			return err == nil
		}},
		{"domain", func(*milnerScenario) []string { return nil }, func(s *milnerScenario) bool {
			out, _ := virshOut("list", "--all", "--name")
			return strings.Contains(out, s.cluster+"-")
		}},
		{"replace", func(s *milnerScenario) []string {
			s.mustMilner("up", "--yes")
			oldW1 = virsh(s.t, "domuuid", s.domain("w-1"))
			s.nodes[1].Memory = 1536
			s.writeStackFile()
			return []string{"--replace", "w-1"}
		}, func(s *milnerScenario) bool {
			uuid, err := virshOut("domuuid", s.domain("w-1"))
			return err != nil || uuid != oldW1
		}},
	}
	subnet := 61
	for _, be := range []string{"file", "postgres"} {
		for _, p := range points {
			t.Run(be+"/"+p.name, func(t *testing.T) {
				id := "m-int-" + be[:1] + "-" + p.name
				url := ""
				if be == "postgres" {
					url = postgresURL(t, "milner_it_int_"+p.name)
				}
				s := newMilnerScenarioOn(t, id, subnet, url)
				subnet++
				extra := p.prepare(s)

				args := append([]string{"up", "--yes"}, extra...)
				r := s.interruptWhen(p.reached, args...)
				if r.code != exitInterrupted || !strings.Contains(r.stderr, "cancelling gracefully") {
					t.Fatalf("interrupted up: exit %d, want %d and the graceful note:\n%s", r.code, exitInterrupted, r.out())
				}
				s.requireConsistent("after the interrupt")
				s.requireNoLocks()
				inodes := s.volumeInodes()

				s.mustMilner(args...)
				for p, ino := range inodes {
					if got := inode(t, p); got != ino {
						t.Errorf("volume %s recreated by the next up (inode %d, was %d)", p, got, ino)
					}
				}
				s.requireConsistent("after the next up")
				if got := len(s.domains()); got != len(s.nodes) {
					t.Errorf("%d domains after the next up, want %d", got, len(s.nodes))
				}
				s.mustMilner("preview", "--expect-no-changes")
			})
		}
	}
}

// exitInterrupted is milner's exit code after an interrupt.
const exitInterrupted = 8

// interruptWhen starts milner with args, sends SIGINT to its process
// group once reached reports true, and returns how it ended.
func (s *milnerScenario) interruptWhen(reached func(*milnerScenario) bool, args ...string) cmdResult {
	s.t.Helper()
	return s.actWhen(reached, func(pid int) error { return syscall.Kill(-pid, syscall.SIGINT) }, args...)
}

// actWhen starts milner with args, runs act with its pid once reached
// reports true, and returns how it ended.
func (s *milnerScenario) actWhen(reached func(*milnerScenario) bool, act func(pid int) error, args ...string) cmdResult {
	s.t.Helper()
	var stdout, stderr strings.Builder
	cmd := s.command(args, &stdout, &stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	sent := time.Time{}
	var err error
poll:
	for deadline := time.Now().Add(4 * time.Minute); ; {
		select {
		case err = <-done:
			break poll
		case <-time.After(20 * time.Millisecond):
		}
		if sent.IsZero() && reached(s) {
			if kerr := act(cmd.Process.Pid); kerr != nil {
				s.t.Fatal(kerr)
			}
			sent = time.Now()
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			s.t.Fatalf("milner %s: still running after 4 minutes (interrupt sent: %v)", strings.Join(args, " "), !sent.IsZero())
		}
	}
	if sent.IsZero() {
		s.t.Fatalf("milner %s ended before the event it was to be acted on at:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	}
	r := s.exited(args, err, &stdout, &stderr)
	s.t.Logf("milner %s: acted at the event, then exit %d %s later\n--- stdout\n%s--- stderr\n%s", strings.Join(args, " "), r.code,
		time.Since(sent).Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

// requireConsistent fails unless the state records exactly what libvirt
// holds of the scenario (pool, network, volumes, domains by UUID) and no
// pending operation.
func (s *milnerScenario) requireConsistent(when string) {
	s.t.Helper()
	var pending []string
	for _, op := range s.exported().PendingOperations {
		pending = append(pending, string(op.Type)+" "+string(op.Resource.URN))
	}
	if len(pending) > 0 {
		s.t.Errorf("%s: the state records pending operations %v", when, pending)
	}
	live := map[string]string{}
	for _, d := range s.domains() {
		live[d] = virsh(s.t, "domuuid", d)
	}
	if inState := s.stateIDs(tDomain); !maps.Equal(live, inState) {
		s.t.Errorf("%s: libvirt holds domains %v, the state %v", when, live, inState)
	}
	_, perr := virshOut("pool-info", s.cluster)
	_, nerr := virshOut("net-info", s.cluster)
	if inState := len(s.stateIDs(tPool)) > 0; inState != (perr == nil) {
		s.t.Errorf("%s: pool in state %v, in libvirt %v", when, inState, perr == nil)
	}
	if inState := len(s.stateIDs(tNetwork)) > 0; inState != (nerr == nil) {
		s.t.Errorf("%s: network in state %v, in libvirt %v", when, inState, nerr == nil)
	}
	// A dir pool's volumes are its directory's files (libvirt's own
	// vol-list needs a pool-refresh to see them).
	var files, ids []string
	paths, _ := filepath.Glob(filepath.Join(s.dir, "pool", "*"))
	for _, p := range paths {
		files = append(files, filepath.Base(p))
	}
	for _, id := range s.stateIDs(tVolume) {
		ids = append(ids, filepath.Base(id))
	}
	slices.Sort(files)
	slices.Sort(ids)
	if !slices.Equal(files, ids) {
		s.t.Errorf("%s: libvirt's pool holds volumes %v, the state %v", when, files, ids)
	}
	s.t.Logf("%s: libvirt and state: pool %v, network %v, %d volumes, %d domains (libvirt %d), %d pending operations",
		when, perr == nil, nerr == nil, len(ids), len(s.stateIDs(tDomain)), len(live), len(pending))
}

// requireNoLocks fails if the backend's lock of the stack or Milner's own
// lock is still held.
func (s *milnerScenario) requireNoLocks() {
	s.t.Helper()
	unlock, err := s.stack.Lock(context.Background())
	if err != nil {
		s.t.Errorf("Milner's lock is still held: %v", err)
	} else {
		unlock()
	}
	var left []string
	if s.url == "" {
		root := filepath.Join(s.dir, "state", ".pulumi", "locks")
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() && strings.HasSuffix(p, ".json") {
				left = append(left, p)
			}
			return nil
		})
	} else {
		table := s.url[strings.LastIndex(s.url, "table=")+len("table="):]
		db, err := sql.Open("postgres", strings.TrimSuffix(s.url, "&table="+table))
		if err != nil {
			s.t.Fatal(err)
		}
		defer func() { _ = db.Close() }()
		rows, err := db.Query(fmt.Sprintf("SELECT key FROM %s WHERE key LIKE '.pulumi/locks/%%'", table))
		if err != nil {
			s.t.Fatal(err)
		}
		defer func() { _ = rows.Close() }()
		for rows.Next() {
			var k string
			_ = rows.Scan(&k)
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		s.t.Errorf("the backend's lock is left: %v", left)
	}
}

// volumeInodes returns the inode of every volume file in the pool.
func (s *milnerScenario) volumeInodes() map[string]uint64 {
	out := map[string]uint64{}
	files, _ := filepath.Glob(filepath.Join(s.dir, "pool", "*"))
	for _, f := range files {
		out[f] = inode(s.t, f)
	}
	return out
}
