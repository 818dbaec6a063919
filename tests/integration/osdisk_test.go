//go:build integration

package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// `milner up --replace cp-1 --os-disk` on the real engine and libvirt: the
// node's domain and OS volume are replaced, its data volume is kept, and
// the OS volume is protected again afterwards; a refused run and a usage
// mistake leave the protection as it was. (The scenario's stack has no
// Talos layer: the Talos calls are tested against the Talos API test
// double in internal/upgrade.)
func TestMilnerOSDiskReplace(t *testing.T) {
	s := newMilnerScenario(t, "m-osdisk", 27)
	s.mustMilner("up", "--yes")
	cp := s.domain("cp-1")
	before := s.uuids()
	osVol, data := s.vol("cp-1", "os"), s.vol("cp-1", "data")
	dataInode := inode(t, data)
	// Mark the OS volume's file old: a fresh volume has a new mtime.
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(osVol, old, old); err != nil {
		t.Fatal(err)
	}
	osProtected := func(what string) {
		t.Helper()
		rs, err := s.stack.Resources(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Name() == s.cluster+"-cp-1-os" {
				if !r.Protect {
					t.Errorf("%s: the OS volume %s is not protected", what, r.URN)
				}
				return
			}
		}
		t.Errorf("%s: the state has no OS volume %s-cp-1-os", what, s.cluster)
	}

	if r := s.milner("up", "--yes", "--os-disk"); r.code != 2 || !strings.Contains(r.out(), "--os-disk needs --replace <node>") {
		t.Errorf("--os-disk without --replace: exit %d, want 2 (usage):\n%s", r.code, r.out())
	}

	// A refused run (an unnamed replace of w-1 pending) changes nothing and
	// leaves the OS volume protected.
	s.nodes[1].Memory = 1536
	s.writeStackFile()
	r := s.milner("up", "--yes", "--replace", "cp-1", "--os-disk")
	refused(t, "up --replace cp-1 --os-disk with w-1's replace unnamed", r, "--replace does not name it", "nothing was applied")
	if r.code != exitRefused {
		t.Errorf("refused run: exit %d, want %d", r.code, exitRefused)
	}
	osProtected("after the refused run")
	if fi, err := os.Stat(osVol); err != nil || !fi.ModTime().Equal(old) {
		t.Fatalf("the refused run touched the OS volume: %v %v", fi.ModTime(), err)
	}
	s.nodes[1].Memory = 1024
	s.writeStackFile()

	s.mustMilner("up", "--yes", "--replace", "cp-1", "--os-disk")
	after := s.uuids()
	if after[cp] == "" || after[cp] == before[cp] {
		t.Errorf("domain %s: uuid %q, was %q; want a new domain", cp, after[cp], before[cp])
	}
	if w := s.domain("w-1"); after[w] != before[w] {
		t.Errorf("domain %s: uuid %q, was %q; want it untouched", w, after[w], before[w])
	}
	fi, err := os.Stat(osVol)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().After(old.Add(24 * time.Hour)) {
		t.Errorf("OS volume %s: mtime %v; want a fresh volume", osVol, fi.ModTime())
	}
	if ino := inode(t, data); ino != dataInode {
		t.Errorf("data volume %s was recreated (inode %d, was %d)", data, ino, dataInode)
	}
	osProtected("after the replace")
	s.hasNoChanges("up after the OS disk replace", s.mustMilner("up", "--yes"))
}
