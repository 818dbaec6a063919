//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/internal/fileid"
)

// TestVolumeRecreatedAtItsPath: the up records which file each volume is
// (the substrate's volumeIdentities output, as the host tells it); a
// preview after it plans nothing. The data volume written to is the same
// volume. Deleted and recreated at the same path with virsh (the same
// key), it is refused by preview and by an up with a pending replace,
// before anything changes: the domains, w-1's memory, the state's record
// and the new file are as they were. The original file put back, the same
// up passes. Recreated again and accepted with --accept-recreated, the up
// records the new file. And a state that records no identity (a stack from
// before milner recorded them) is said so, and its next up, with no other
// change, records them.
//
// Run alone (`flock /tmp/milner-it.lock go test -tags integration -count=1
// -run '^TestVolumeRecreatedAtItsPath$' ./tests/integration/`): 225 s; no
// "violates plan" in any of its ups, nor in TestMilnerOSDiskReplace and
// TestStateRestore run after it. With the rule reverted, `up --replace w-1`
// replaced the domain onto the recreated volume (exit 0) and the test
// failed. A remote libvirt URI tells no file identity (not run).
func TestVolumeRecreatedAtItsPath(t *testing.T) {
	s := newMilnerScenario(t, "m-vol", 33)
	s.mustMilner("up", "--yes")
	data := s.vol("w-1", "data")
	name, logical := filepath.Base(data), s.cluster+"-w-1-data"

	live := func() map[string]string {
		t.Helper()
		out := map[string]string{s.cluster + "-boot": fileid.Of(filepath.Join(s.dir, "pool", s.cluster+"-boot.qcow2"))}
		for _, n := range []string{"cp-1", "w-1"} {
			for _, k := range []string{"os", "data"} {
				out[s.cluster+"-"+n+"-"+k] = fileid.Of(s.vol(n, k))
			}
		}
		for l, id := range out {
			if !fileid.Tells(id) {
				t.Fatalf("volume %s: the filesystem tells no birth time and no file handle (%q)", l, id)
			}
		}
		return out
	}
	original := live()
	if got := s.volumeIdentities(); !maps.Equal(got, original) {
		t.Fatalf("the up recorded %v, want the files' identities %v", got, original)
	}
	s.mustMilner("preview", "--expect-no-changes")

	// A write (the VM's, here ours: the same bytes, new mtime and ctime)
	// keeps the file.
	f, err := os.OpenFile(data, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("QFI\xfb"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s.hasNoChanges("up after a write to the data volume", s.mustMilner("up", "--yes"))

	// A change pending (w-1's memory: a replace of its domain), then the
	// data volume deleted and recreated at its path, the original kept
	// aside under a hard link.
	s.nodes[1].Memory = 1536
	s.writeStackFile()
	before := s.uuids()
	aside := filepath.Join(s.dir, "w-1-data.orig")
	if err := os.Link(data, aside); err != nil {
		t.Fatal(err)
	}
	recreate := func() string {
		t.Helper()
		virsh(t, "vol-delete", name, "--pool", s.cluster)
		virsh(t, "vol-create-as", s.cluster, name, "1G", "--format", "qcow2")
		return fileid.Of(data)
	}
	again := recreate()
	for _, args := range [][]string{{"preview"}, {"up", "--yes", "--replace", "w-1"}} {
		r := s.milner(args...)
		refused(t, strings.Join(args, " ")+" on a recreated volume", r,
			fmt.Sprintf("volume %q (%s, node w-1's data disk) as the file %s", name, logical, original[logical]),
			fmt.Sprintf("the file at %s is %s", data, again), "recreated at the same path outside milner",
			"put the original file back at "+data, "--accept-recreated "+logical, "[rule state-identity]", "nothing was changed")
		if r.code != exitRefused {
			t.Errorf("%s: exit %d, want %d", strings.Join(args, " "), r.code, exitRefused)
		}
	}
	if got := s.uuids(); !maps.Equal(got, before) {
		t.Errorf("the refused up changed the domains: %v, were %v", got, before)
	}
	if info := virsh(t, "dominfo", s.domain("w-1")); !strings.Contains(info, "1048576 KiB") {
		t.Errorf("the refused up changed w-1's memory:\n%s", info)
	}
	if got := s.volumeIdentities(); !maps.Equal(got, original) {
		t.Errorf("the refused up changed the state's record: %v, was %v", got, original)
	}
	if got := fileid.Of(data); got != again {
		t.Errorf("the refused up touched the recreated file: %q, was %q", got, again)
	}

	// The original back at its path: the same volume, the up passes.
	if err := os.Rename(aside, data); err != nil {
		t.Fatal(err)
	}
	virsh(t, "pool-refresh", s.cluster)
	s.mustMilner("up", "--yes", "--replace", "w-1")
	if got := s.uuids(); got[s.domain("w-1")] == before[s.domain("w-1")] || got[s.domain("cp-1")] != before[s.domain("cp-1")] {
		t.Errorf("domains %v, were %v: want w-1 replaced, cp-1 kept", got, before)
	}
	if got := s.volumeIdentities(); !maps.Equal(got, original) {
		t.Errorf("after the up on the original file the state records %v, want %v", got, original)
	}

	// Recreated again, the original file gone (its inode number free to be
	// handed out again): refused; then, meant, --accept-recreated records
	// the new file; it names a recreated volume, nothing else.
	again = recreate()
	t.Logf("recreated without a link to the original: %q, was %q", again, original[logical])
	refused(t, "up on a recreated volume", s.milner("up", "--yes"), "recreated at the same path outside milner", fmt.Sprintf("the file at %s is %s", data, again))
	other := s.cluster + "-cp-1-data"
	refused(t, "--accept-recreated of a volume not recreated", s.milner("up", "--yes", "--accept-recreated", logical, "--accept-recreated", other),
		"--accept-recreated "+other+": no volume of that logical name")
	r := s.mustMilner("up", "--yes", "--accept-recreated", logical)
	s.hasNoChanges("up --accept-recreated", r)
	if want := "the file identity of volume " + logical; !strings.Contains(r.stdout, want) {
		t.Errorf("up --accept-recreated: stdout lacks %q:\n%s", want, r.out())
	}
	want := maps.Clone(original)
	want[logical] = again
	if got := s.volumeIdentities(); !maps.Equal(got, want) {
		t.Errorf("after --accept-recreated the state records %v, want %v", got, want)
	}
	s.hasNoChanges("up after --accept-recreated", s.mustMilner("up", "--yes"))
	s.mustMilner("preview", "--expect-no-changes")

	// A state that records no identity: nothing to compare, said so; the
	// next up, with no other change, records them.
	err = s.stack.EditState(context.Background(), func(d *apitype.DeploymentV3) error {
		for i := range d.Resources {
			if string(d.Resources[i].Type) == substrate.LibvirtType {
				delete(d.Resources[i].Outputs, substrate.VolumeIdentities)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.volumeIdentities(); len(got) != 0 {
		t.Fatalf("the edited state still records %v", got)
	}
	s.mustMilner("preview", "--expect-no-changes")
	start := time.Now()
	r = s.mustMilner("up", "--yes")
	t.Logf("the recording up took %s", time.Since(start).Round(time.Millisecond))
	s.hasNoChanges("the recording up", r)
	for _, w := range []string{"the state records no file identity of volume", "the up records them"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("the recording up: stderr lacks %q:\n%s", w, r.out())
		}
	}
	if got := s.volumeIdentities(); !maps.Equal(got, live()) {
		t.Errorf("the recording up recorded %v, want %v", got, live())
	}
	s.mustMilner("preview", "--expect-no-changes")
	if r := s.mustMilner("up", "--yes"); strings.Contains(r.out(), "records in state") {
		t.Errorf("an up after the recording up records again:\n%s", r.out())
	}
}

// volumeIdentities is the substrate component's volumeIdentities output
// as the stack's state records it (empty when it records none).
func (s *scenario) volumeIdentities() map[string]string {
	s.t.Helper()
	for _, r := range s.exported().Resources {
		if string(r.Type) != substrate.LibvirtType {
			continue
		}
		m, _ := r.Outputs[substrate.VolumeIdentities].(map[string]any)
		out := map[string]string{}
		for k, v := range m {
			out[k], _ = v.(string)
		}
		return out
	}
	s.t.Fatal("the state holds no libvirt substrate component")
	return nil
}
