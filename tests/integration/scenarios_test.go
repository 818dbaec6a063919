//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/milner/milner/internal/engine"
)

// replaceOps are the engine's operations of a replace (with
// delete-before-replace the engine reports all three for one resource).
var replaceOps = []apitype.OpType{apitype.OpReplace, apitype.OpCreateReplacement, apitype.OpDeleteReplaced}

// 1. `up` from empty creates every resource; every domain is running.
func TestUpFromEmpty(t *testing.T) {
	s := newScenario(t, "up", 11)
	r := s.up()

	created := map[string]int{}
	for _, st := range r.Steps {
		if st.Op != "create" {
			t.Errorf("step %s %s: want create", st.Op, st.Name())
		}
		created[st.Type]++
	}
	want := map[string]int{tPool: 1, tNetwork: 1, tVolume: 1 + 2*len(s.nodes), tDomain: len(s.nodes)}
	for typ, n := range want {
		if created[typ] != n {
			t.Errorf("created %d %s, want %d", created[typ], typ, n)
		}
	}
	// The outputs as milner up reads them right after the up (the engine
	// answers the Automation API's own result reads without the CLI; this
	// read must still see the real outputs).
	outs, err := s.stack.Outputs(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	machineIDs := map[string]string{}
	nodes, _ := outs["nodes"].([]any)
	for _, o := range nodes {
		n, _ := o.(map[string]any)
		name, _ := n["name"].(string)
		machineIDs[s.domain(name)], _ = n["machineId"].(string)
	}
	if len(nodes) != len(s.nodes) {
		t.Errorf("output nodes: %v, want %d nodes", outs["nodes"], len(s.nodes))
	}
	ids := s.stateIDs(tDomain)
	for _, n := range s.nodes {
		d := s.domain(n.Name)
		if st := virsh(t, "domstate", d); st != "running" {
			t.Errorf("domain %s is %q, want running", d, st)
		}
		if uuid := virsh(t, "domuuid", d); ids[d] != uuid || machineIDs[d] != uuid {
			t.Errorf("domain %s: state id %q, output machineId %q, libvirt uuid %q", d, ids[d], machineIDs[d], uuid)
		}
		for _, kind := range []string{"os", "data"} {
			if _, err := os.Stat(s.vol(n.Name, kind)); err != nil {
				t.Errorf("volume: %v", err)
			}
		}
	}
	if info := virsh(t, "net-info", s.cluster); !regexp.MustCompile(`Active:\s+yes`).MatchString(info) {
		t.Errorf("network %s is not active:\n%s", s.cluster, info)
	}
	if xml := virsh(t, "net-dumpxml", s.cluster); strings.Contains(xml, "<forward") {
		t.Errorf("network %s forwards traffic; want isolated:\n%s", s.cluster, xml)
	}
	if info := virsh(t, "pool-info", s.cluster); !regexp.MustCompile(`State:\s+running`).MatchString(info) {
		t.Errorf("pool %s is not running:\n%s", s.cluster, info)
	}
}

// 2. An immediate preview and a preview --refresh show zero changes.
func TestPreviewAfterUpIsNoOp(t *testing.T) {
	s := newScenario(t, "noop", 12)
	s.up()
	for _, refresh := range []bool{false, true} {
		start := time.Now()
		r := s.preview(refresh)
		t.Logf("preview (refresh=%v): %v in %s", refresh, r.Summary, time.Since(start).Round(time.Millisecond))
		s.requireNoChanges("preview refresh="+strconv.FormatBool(refresh), r)
	}
}

// 3. Changing one node's memory previews exactly one replace, that node's
// domain, and nothing else; after up, a marker written into the node's data
// volume before is intact and the new domain uses the same volumes.
func TestMemoryChangeReplacesOnlyThatDomain(t *testing.T) {
	s := newScenario(t, "mem", 13)
	s.up()
	w := s.nodes[1]
	dom, data := s.domain(w.Name), s.vol(w.Name, "data")
	oldUUID := virsh(t, "domuuid", dom)
	oldDisks := disks(t, dom)
	// The running domain holds QEMU's write lock on its disks: stop it,
	// write the marker through the qcow2 layer, start it again.
	virsh(t, "destroy", dom)
	run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0xab 0 64k", data)
	virsh(t, "start", dom)
	oldInode := inode(t, data)
	s.requireNoChanges("preview before the change", s.preview(false))

	s.nodes[1].Memory = 1536
	s.apply()
	r := s.preview(false)
	ops := map[string]bool{}
	for _, st := range r.Changes() {
		if st.Type != tDomain || st.Name() != dom {
			t.Errorf("unexpected change %s %s %s", st.Op, st.Type, st.Name())
		}
		ops[string(st.Op)] = true
		if st.Op == "replace" && !slices.Contains(st.Keys, "memory") {
			t.Errorf("replace of %s: keys %v, want memory among them", dom, st.Keys)
		}
	}
	if !ops["replace"] {
		t.Fatalf("want a replace of %s, got %s", dom, steps(r.Changes()))
	}
	for op, n := range r.Summary {
		if op != "same" && (op != "replace" || n != 1) {
			t.Errorf("summary %v: want one replace and the rest unchanged", r.Summary)
		}
	}

	s.up()
	if uuid := virsh(t, "domuuid", dom); uuid == oldUUID {
		t.Errorf("domain %s kept uuid %s; want a new domain", dom, uuid)
	}
	if info := virsh(t, "dominfo", dom); !strings.Contains(info, strconv.Itoa(1536*1024)+" KiB") {
		t.Errorf("domain %s does not have 1536 MiB:\n%s", dom, info)
	}
	if got := disks(t, dom); !slices.Equal(got, oldDisks) {
		t.Errorf("domain %s disks %v, want the same volumes %v", dom, got, oldDisks)
	}
	if ino := inode(t, data); ino != oldInode {
		t.Errorf("data volume %s was recreated (inode %d, was %d)", data, ino, oldInode)
	}
	// -U: the new domain holds the lock; read-only access is shared.
	out := run(t, "qemu-io", "-r", "-U", "-f", "qcow2", "-c", "read -P 0xab 0 64k", data)
	if !strings.Contains(out, "read 65536/65536 bytes") || strings.Contains(out, "verification failed") {
		t.Errorf("marker in %s is not intact:\n%s", data, out)
	}
	s.requireNoChanges("preview after the replace", s.preview(false))
}

// 4. A Talos version bump (with the new boot image it brings) previews no
// replace of any volume or domain.
func TestTalosBumpReplacesNothing(t *testing.T) {
	s := newScenario(t, "talos", 14)
	s.up()
	before := s.stateIDs(tDomain)

	s.talos = "v1.9.6"
	s.boot = filepath.Join(s.dir, "boot-v1.9.6.qcow2")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", s.boot, "64M")
	s.apply()
	r := s.preview(false)
	for _, st := range r.Steps {
		if slices.Contains(replaceOps, st.Op) || st.Op == "delete" || st.Op == "create" {
			t.Errorf("Talos bump plans %s of %s %s", st.Op, st.Type, st.Name())
		}
	}
	s.requireNoChanges("preview of the Talos bump", r)
	s.up()
	if after := s.stateIDs(tDomain); !maps.Equal(after, before) {
		t.Errorf("domains changed: %v, were %v", after, before)
	}
}

// 5. A change that would replace a protected volume is refused by the
// engine with its protect error, and nothing changes on disk.
func TestProtectedVolumeReplaceIsRefused(t *testing.T) {
	s := newScenario(t, "protect", 15)
	s.up()
	disk := snapshotDisk(t, s)
	domains := s.stateIDs(tDomain)

	s.nodes[1].Data = 2 // a volume's size is ForceNew in provider 0.8.x
	s.apply()
	const protectErr = "as it is currently marked for protection"
	if _, _, err := s.stack.Preview(context.Background(), engine.PlanOptions{}); err == nil || !strings.Contains(err.Error(), protectErr) {
		t.Fatalf("preview: want the engine's protect error, got %v", err)
	}
	if _, err := s.stack.Up(context.Background()); err == nil || !strings.Contains(err.Error(), protectErr) {
		t.Fatalf("up: want the engine's protect error, got %v", err)
	}
	if after := snapshotDisk(t, s); !maps.Equal(after, disk) {
		t.Errorf("volumes changed on disk:\n got %v\nwant %v", after, disk)
	}
	for name, id := range domains {
		if uuid := virsh(t, "domuuid", name); uuid != id {
			t.Errorf("domain %s: uuid %s, was %s", name, uuid, id)
		}
	}
	s.nodes[1].Data = 1
	s.apply()
	s.requireNoChanges("preview after reverting", s.preview(true))
}

// 6. destroy deletes no protected resource. A plain destroy runs no
// program, so the engine refuses the persistent resources first for their
// delete hooks (components/lifecycle; pulumi pkg/v3 v3.276.0
// engine/destroy.go: "You must run with the `--run-program` flag to use
// delete hooks during destroy"); their protect flag stands behind it.
func TestDestroyKeepsProtected(t *testing.T) {
	s := newScenario(t, "destroy", 16)
	s.up()
	disk := snapshotDisk(t, s)

	r, err := s.stack.Destroy(context.Background())
	if err == nil || !strings.Contains(err.Error(), "delete hooks registered") {
		t.Fatalf("destroy: want the engine's refusal for the delete hooks, got %v", err)
	}
	for _, st := range r.Steps {
		if st.Op == "delete" && !st.Failed && st.Type != tDomain {
			t.Errorf("destroy deleted %s %s", st.Type, st.Name())
		}
	}
	if after := snapshotDisk(t, s); !maps.Equal(after, disk) {
		t.Errorf("volumes changed on disk:\n got %v\nwant %v", after, disk)
	}
	virsh(t, "pool-info", s.cluster)
	virsh(t, "net-info", s.cluster)
	kept := map[string]int{}
	res, err := s.stack.Resources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Protect {
			kept[r.Type]++
		}
	}
	want := map[string]int{tPool: 1, tNetwork: 1, tVolume: 1 + 2*len(s.nodes)}
	for typ, n := range want {
		if kept[typ] != n {
			t.Errorf("state keeps %d protected %s, want %d", kept[typ], typ, n)
		}
	}
}

// 7. A domain defined outside Pulumi (virsh define, same shape) is adopted
// through the node's adoptId; the preview after adoption is a no-op.
func TestAdoptDomain(t *testing.T) {
	s := newScenario(t, "adopt", 17)
	s.up()
	dom, uuid := s.defineOutsidePulumi("w-1")

	s.nodes[1].AdoptID = uuid
	s.apply()
	r := s.preview(false)
	ch := r.Changes()
	if len(ch) != 1 || ch[0].Op != "import" || ch[0].Name() != dom {
		t.Fatalf("want exactly one import of %s, got %s", dom, steps(ch))
	}
	s.up()
	if id := s.stateIDs(tDomain)[dom]; id != uuid {
		t.Errorf("state holds %s as %q, want the adopted %s", dom, id, uuid)
	}
	if got := virsh(t, "domuuid", dom); got != uuid {
		t.Errorf("domain %s is now %s, want the adopted %s", dom, got, uuid)
	}
	s.requireNoChanges("preview after adoption", s.preview(false))
	s.requireNoChanges("preview --refresh after adoption", s.preview(true))

	// Dropping adoptId hands the domain fully to the program: on provider
	// 0.8.x the fields it never read (see LibvirtDomainIgnoredOnAdopt) are
	// then compared, so at most that one domain is replaced, nothing else.
	s.nodes[1].AdoptID = ""
	s.apply()
	r = s.preview(false)
	for _, st := range r.Changes() {
		if st.Name() != dom {
			t.Errorf("dropping adoptId changes %s %s", st.Op, st.Name())
		}
	}
	t.Logf("preview after dropping adoptId: %v%s", r.Summary, steps(r.Changes()))
}

// 8. libvirtd is killed during an up that creates domains. After a restart,
// the documented recovery converges: no duplicate domain, no volume
// recreated, state matches libvirt. The recovery, for each domain that
// libvirt has and state lacks (an orphan): `virsh start` it if it is shut
// off, set its node's adoptId to `virsh domuuid`, then up.
func TestLibvirtdKilledDuringUp(t *testing.T) {
	s := newScenario(t, "fault", 18)
	// Whatever happens below, the cleanup needs a daemon.
	t.Cleanup(func() {
		if err := libvirtUp(); err != nil {
			t.Log(err)
		}
	})

	type result struct {
		r   *engine.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := s.stack.Up(context.Background())
		done <- result{r, err}
	}()
	killed := false
	for deadline := time.Now().Add(3 * time.Minute); !killed && time.Now().Before(deadline); {
		select {
		case res := <-done:
			t.Fatalf("up ended before any domain was defined: %v", res.err)
		default:
		}
		if out, _ := virshOut("list", "--all", "--name"); strings.Contains(out, s.cluster+"-") {
			killLibvirtd(t)
			killed = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !killed {
		t.Fatal("no domain was defined within 3 minutes")
	}
	res := <-done
	if res.err == nil {
		t.Fatal("up succeeded although libvirtd was killed while it created domains")
	}
	t.Logf("up failed as expected: %v", res.err)
	if err := libvirtUp(); err != nil {
		t.Fatal(err)
	}

	// What the crash left: volumes (by inode) and domains unknown to state.
	volumes := map[string]uint64{}
	for _, n := range s.nodes {
		for _, kind := range []string{"os", "data"} {
			if p := s.vol(n.Name, kind); fileExists(p) {
				volumes[p] = inode(t, p)
			}
		}
	}
	inState := s.stateIDs(tDomain)
	orphans := 0
	for i, n := range s.nodes {
		d := s.domain(n.Name)
		uuid, err := virshOut("domuuid", d)
		if err != nil || inState[d] == uuid {
			continue // absent from libvirt (up creates it) or already in state
		}
		// A kill between define and start leaves the orphan shut off; the
		// import must match the program (running: true) or the engine
		// refuses it, so the recovery starts it first.
		if st := virsh(t, "domstate", d); st != "running" {
			t.Logf("orphan %s is %q; starting it", d, st)
			virsh(t, "start", d)
		}
		t.Logf("orphan: %s (%s) is in libvirt, not in state; adopting it", d, uuid)
		s.nodes[i].AdoptID = uuid
		orphans++
	}
	t.Logf("after the crash: %d volumes on disk, %d domains in state, %d orphans", len(volumes), len(inState), orphans)
	s.apply()
	r := s.up()

	for _, st := range r.Steps {
		if st.Type == tVolume && st.Op != "same" && st.Op != "create" {
			t.Errorf("recovery did %s of volume %s", st.Op, st.Name())
		}
	}
	for p, ino := range volumes {
		if got := inode(t, p); got != ino {
			t.Errorf("volume %s was recreated (inode %d, was %d)", p, got, ino)
		}
	}
	var want []string
	for _, n := range s.nodes {
		want = append(want, s.domain(n.Name))
	}
	slices.Sort(want)
	if got := s.domains(); !slices.Equal(got, want) {
		t.Errorf("libvirt has domains %v, want exactly %v", got, want)
	}
	ids := s.stateIDs(tDomain)
	for _, d := range want {
		if uuid := virsh(t, "domuuid", d); ids[d] != uuid {
			t.Errorf("domain %s: state id %q, libvirt uuid %q", d, ids[d], uuid)
		}
		if st := virsh(t, "domstate", d); st != "running" {
			t.Errorf("domain %s is %q, want running", d, st)
		}
	}
	s.requireNoChanges("preview --refresh after recovery", s.preview(true))
}

// libvirtUp (re)starts libvirtd with scripts/libvirt-up.sh. A restarted
// daemon first reconnects to every running QEMU, which on a loaded machine
// can take longer than the script's 30 s wait: the script is idempotent,
// so it is simply run again.
func libvirtUp() error {
	var err error
	for range 4 {
		var out []byte
		if out, err = exec.Command(filepath.Join(repo, "scripts", "libvirt-up.sh")).CombinedOutput(); err == nil {
			return nil
		}
		err = fmt.Errorf("scripts/libvirt-up.sh: %w: %s", err, out)
	}
	return err
}

// killLibvirtd kills the running libvirtd with SIGKILL, by its pid.
func killLibvirtd(t *testing.T) {
	t.Helper()
	out := strings.TrimSpace(run(t, "pgrep", "-x", "libvirtd"))
	pid, err := strconv.Atoi(strings.Fields(out)[0])
	if err != nil {
		t.Fatalf("libvirtd pid %q: %v", out, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill libvirtd %d: %v", pid, err)
	}
	t.Logf("killed libvirtd (pid %d)", pid)
}

// disks returns the source files of a domain's disks, in order.
func disks(t *testing.T, dom string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(virsh(t, "domblklist", dom, "--details"), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "disk" {
			out = append(out, f[3])
		}
	}
	return out
}

// snapshotDisk returns, per volume file of the scenario, its inode, size and
// modification time: any recreation or rewrite changes it.
func snapshotDisk(t *testing.T, s *scenario) map[string]string {
	t.Helper()
	snap := map[string]string{}
	entries, err := os.ReadDir(filepath.Join(s.dir, "pool"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(s.dir, "pool", e.Name())
		snap[e.Name()] = strconv.FormatUint(inode(t, p), 10) + "/" + strconv.FormatInt(fi.Size(), 10) + "/" + fi.ModTime().String()
	}
	return snap
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
