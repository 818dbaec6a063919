//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/pkg/v3/display"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/tests/harness"
)

// The `milner` command, driven black-box: the binary is built once per test
// process and run against a scenario directory that stands in for a repo
// (its own Pulumi.it.yaml, the repo's .tools and CLI pin) with the
// scenario's file backend. Stack "it" and passphrase "milner-it" are the
// harness's, so its cleanup (unprotect, destroy, then virsh by name) also
// covers what the command made.

// milnerStack is the stack name the command is given.
const milnerStack = itStack

// cmdResult is one run of the milner binary.
type cmdResult struct {
	code   int
	stdout string
	stderr string
}

func (r cmdResult) out() string { return r.stdout + r.stderr }

// milnerScenario is a harness scenario driven through the milner binary.
type milnerScenario struct {
	*scenario
	bin string
}

// newMilnerScenario prepares a harness scenario for the command, whose
// project directory (--dir) the scenario's is. Before the harness's
// cleanup, `milner teardown --confirm <cluster>` removes the stack.
func newMilnerScenario(t *testing.T, id string, subnet int) *milnerScenario {
	t.Helper()
	return newMilnerScenarioOn(t, id, subnet, "")
}

// newMilnerScenarioOn is newMilnerScenario on the backend url.
func newMilnerScenarioOn(t *testing.T, id string, subnet int, url string) *milnerScenario {
	t.Helper()
	bin := harness.Milner(t, repo)
	s := &milnerScenario{scenario: newScenarioOn(t, id, subnet, url), bin: bin}
	// Runs before the harness's cleanup (registered earlier, run later).
	t.Cleanup(func() {
		if !fileExists(s.stackFile()) {
			return
		}
		if r := s.milnerIn("", "teardown", "--confirm", s.cluster); r.code != 0 {
			t.Logf("cleanup: milner teardown exited %d:\n%s", r.code, r.out())
		}
	})
	return s
}

// milner runs the binary with --stack and --dir after the verb, the
// scenario's backend and passphrase in Pulumi's variables, stdin empty, and
// logs what it printed.
func (s *milnerScenario) milner(args ...string) cmdResult {
	s.t.Helper()
	return s.milnerIn("", args...)
}

// milnerIn is milner with stdin.
func (s *milnerScenario) milnerIn(stdin string, args ...string) cmdResult {
	s.t.Helper()
	var stdout, stderr strings.Builder
	cmd := s.command(args, &stdout, &stderr)
	cmd.Stdin = strings.NewReader(stdin)
	start := time.Now()
	r := s.exited(args, cmd.Run(), &stdout, &stderr)
	s.t.Logf("milner %s: exit %d in %s\n--- stdout\n%s--- stderr\n%s", strings.Join(args, " "), r.code,
		time.Since(start).Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

// command is the binary with --stack and -C after the verb, the
// scenario's backend and passphrase in Pulumi's variables, its output
// going to stdout and stderr.
func (s *milnerScenario) command(args []string, stdout, stderr *strings.Builder) *exec.Cmd {
	full := append([]string{args[0], "--stack", milnerStack, "-C", s.dir}, args[1:]...)
	cmd := exec.Command(s.bin, full...)
	cmd.Env = append(os.Environ(), "PULUMI_BACKEND_URL="+s.backend(), "PULUMI_CONFIG_PASSPHRASE="+itPassphrase)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd
}

// exited is how a run of the binary ended (err is its Run's or Wait's):
// its exit code and output. Any error but an exit status fails the test.
func (s *milnerScenario) exited(args []string, err error, stdout, stderr *strings.Builder) cmdResult {
	s.t.Helper()
	return exitResult(s.t, "milner "+strings.Join(args, " "), err, stdout, stderr)
}

// exitResult is how a command (what) ended, given its Run's or Wait's
// error: its exit code and output. Any error but an exit status fails t.
func exitResult(t *testing.T, what string, err error, stdout, stderr *strings.Builder) cmdResult {
	t.Helper()
	r := cmdResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("%s: %v", what, err)
	}
	return r
}

// mustMilner runs the binary and fails the test unless it exits 0.
func (s *milnerScenario) mustMilner(args ...string) cmdResult {
	s.t.Helper()
	r := s.milner(args...)
	if r.code != 0 {
		s.t.Fatalf("milner %s: exit %d, want 0:\n%s", strings.Join(args, " "), r.code, r.out())
	}
	return r
}

// refused requires a non-zero exit whose output says want.
func refused(t *testing.T, what string, r cmdResult, want ...string) {
	t.Helper()
	if r.code == 0 {
		t.Fatalf("%s: exit 0, want a refusal:\n%s", what, r.out())
	}
	for _, w := range want {
		if !strings.Contains(r.out(), w) {
			t.Errorf("%s: output lacks %q:\n%s", what, w, r.out())
		}
	}
}

// uuids returns the libvirt UUID of each of the scenario's domains.
func (s *milnerScenario) uuids() map[string]string {
	s.t.Helper()
	out := map[string]string{}
	for _, d := range s.domains() {
		out[d] = virsh(s.t, "domuuid", d)
	}
	return out
}

// decoded decodes r's stdout, which must be exactly one JSON document
// (what --json prints; the progress goes to stderr), strictly: no field
// that v lacks.
func decoded(t *testing.T, what string, r cmdResult, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s --json: %v:\n%s", what, err, r.out())
	}
	if dec.More() {
		t.Fatalf("%s --json: more than one document on stdout:\n%s", what, r.stdout)
	}
}

// digestSteps are the steps of the Pulumi preview digest a gated verb's
// --json carries ("pulumi"), as "op name" (display.PreviewDigest).
func digestSteps(t *testing.T, what string, o pipeline.Outcome) []string {
	t.Helper()
	var d display.PreviewDigest
	if err := json.Unmarshal(o.Pulumi, &d); err != nil {
		t.Fatalf("%s --json: its \"pulumi\" is not Pulumi's preview digest: %v", what, err)
	}
	var steps []string
	for _, st := range d.Steps {
		steps = append(steps, string(st.Op)+" "+st.URN.Name())
	}
	return steps
}

// hasNoChanges requires an `up` that printed the no-change line.
func (s *milnerScenario) hasNoChanges(what string, r cmdResult) {
	s.t.Helper()
	if want := fmt.Sprintf("stack %s: no changes", milnerStack); !strings.Contains(r.stdout, want) {
		s.t.Errorf("%s: stdout lacks %q:\n%s", what, want, r.out())
	}
}

// 1. The gate refuses a domain replace that --replace does not name and
// applies nothing; naming the node replaces exactly its domain and keeps its
// data volume.
func TestMilnerGateReplace(t *testing.T) {
	s := newMilnerScenario(t, "m-gate", 21)
	s.mustMilner("up", "--yes")
	cp, w := s.domain("cp-1"), s.domain("w-1")
	before := s.uuids()
	if len(before) != 2 {
		t.Fatalf("after up: domains %v, want %s and %s", before, cp, w)
	}
	data := s.vol("w-1", "data")
	oldInode := inode(t, data)

	s.nodes[1].Memory = 1536
	s.writeStackFile()
	r := s.milner("up", "--yes")
	refused(t, "up without --replace", r, "--replace does not name it", "milner up --stack it --replace w-1", "nothing was applied")
	if after := s.uuids(); !maps.Equal(after, before) {
		t.Fatalf("refused up changed domains: %v, were %v", after, before)
	}
	if info := virsh(t, "dominfo", w); !strings.Contains(info, "1048576 KiB") {
		t.Errorf("refused up changed %s's memory:\n%s", w, info)
	}

	// Naming the other node is refused too: the replaced set must equal the
	// named one, and w-1's replace is still unnamed.
	r = s.milner("up", "--yes", "--replace", "cp-1")
	refused(t, "up --replace cp-1", r, "the VM of node w-1 would be replaced (forced by memory) but --replace does not name it", "nothing was applied")
	if after := s.uuids(); !maps.Equal(after, before) {
		t.Fatalf("refused up changed domains: %v, were %v", after, before)
	}

	s.mustMilner("up", "--yes", "--replace", "w-1")
	after := s.uuids()
	if after[w] == "" || after[w] == before[w] {
		t.Errorf("domain %s: uuid %q, was %q; want a new domain", w, after[w], before[w])
	}
	if after[cp] != before[cp] {
		t.Errorf("domain %s: uuid %q, was %q; want it untouched", cp, after[cp], before[cp])
	}
	if info := virsh(t, "dominfo", w); !strings.Contains(info, "1572864 KiB") {
		t.Errorf("domain %s does not have 1536 MiB:\n%s", w, info)
	}
	if ino := inode(t, data); ino != oldInode {
		t.Errorf("data volume %s was recreated (inode %d, was %d)", data, ino, oldInode)
	}
	s.hasNoChanges("up after the replace", s.mustMilner("up", "--yes"))
}

// 2. A running domain defined with virsh for a node of a stack whose other
// resources are up is adopted with `milner adopt`; the next up imports it
// and then nothing changes.
func TestMilnerAdopt(t *testing.T) {
	s := newMilnerScenario(t, "m-adopt", 22)
	s.mustMilner("up", "--yes")
	// The domain leaves Pulumi's hands and is defined again by hand (the
	// harness's engine refresh drops it from state; milner has no refresh verb).
	dom, uuid := s.defineOutsidePulumi("w-1")

	// Without adoption, up refuses the orphan and prints the adopt command.
	r := s.milner("up", "--yes")
	refused(t, "up with an orphan", r, fmt.Sprintf("milner adopt --stack it --node w-1 --id %s", uuid))

	r = s.mustMilner("adopt", "--node", "w-1", "--id", uuid)
	if !strings.Contains(r.stdout, "will be imported") {
		t.Errorf("adopt: stdout lacks %q:\n%s", "will be imported", r.out())
	}
	b, err := os.ReadFile(s.stackFile())
	if err != nil {
		t.Fatal(err)
	}
	// Pulumi's ProjectStack writes the id plain (a UUID is a YAML string
	// unquoted); the engine reads it back below.
	if !regexp.MustCompile(`(?m)^\s+adoptId: "?` + regexp.QuoteMeta(uuid) + `"?$`).Match(b) {
		t.Fatalf("stack file has no adoptId %s:\n%s", uuid, b)
	}

	s.mustMilner("up", "--yes")
	if id := s.stateIDs(tDomain)[dom]; id != uuid {
		t.Errorf("state holds %s as %q, want the adopted %s", dom, id, uuid)
	}
	if got := virsh(t, "domuuid", dom); got != uuid {
		t.Errorf("domain %s is now %s, want the adopted %s", dom, got, uuid)
	}
	if got := s.domains(); len(got) != 2 {
		t.Errorf("domains %v, want exactly two", got)
	}
	s.mustMilner("preview")
	s.requireNoChanges("engine preview after adoption", s.preview(false))
	s.hasNoChanges("up after adoption", s.mustMilner("up", "--yes"))
}

// 3. With the state moved away, up refuses (empty state, live substrate) and
// prints the adopt commands; nothing is created. With the state back, up
// has no changes.
func TestMilnerEmptyStateGuard(t *testing.T) {
	s := newMilnerScenario(t, "m-guard", 23)
	s.mustMilner("up", "--yes")
	before := s.uuids()
	disk := snapshotDisk(t, s.scenario)
	nets := s.virshNames("net-list", "--all", "--name")
	pools := s.virshNames("pool-list", "--all", "--name")

	state, away := filepath.Join(s.dir, "state"), filepath.Join(s.dir, "state.away")
	if err := os.Rename(state, away); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // puts the state back if the test stops early
		if fileExists(away) {
			_ = os.RemoveAll(state)
			_ = os.Rename(away, state)
		}
	})
	r := s.milner("up", "--yes")
	refused(t, "up on empty state", r, "holds no substrate resource", "refused")
	for _, n := range s.nodes {
		d := s.domain(n.Name)
		if want := fmt.Sprintf("milner adopt --stack it --node %s --id %s", n.Name, before[d]); !strings.Contains(r.out(), want) {
			t.Errorf("refusal lacks %q", want)
		}
	}
	if after := s.uuids(); !maps.Equal(after, before) {
		t.Errorf("domains after the refused up: %v, were %v", after, before)
	}
	if after := snapshotDisk(t, s.scenario); !maps.Equal(after, disk) {
		t.Errorf("volumes changed on disk:\n got %v\nwant %v", after, disk)
	}
	if got := s.virshNames("net-list", "--all", "--name"); !slices.Equal(got, nets) || len(got) != 1 {
		t.Errorf("networks %v, were %v", got, nets)
	}
	if got := s.virshNames("pool-list", "--all", "--name"); !slices.Equal(got, pools) || len(got) != 1 {
		t.Errorf("pools %v, were %v", got, pools)
	}

	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, state); err != nil {
		t.Fatal(err)
	}
	s.hasNoChanges("up after the restore", s.mustMilner("up", "--yes"))
	if after := s.uuids(); !maps.Equal(after, before) {
		t.Errorf("domains after the restore: %v, were %v", after, before)
	}
}

// 4. Teardown refuses without the typed cluster name and any partial target,
// deleting nothing; with --confirm it removes every domain, volume, network
// and pool of the stack.
func TestMilnerTeardown(t *testing.T) {
	s := newMilnerScenario(t, "m-down", 24)
	s.mustMilner("up", "--yes")
	before := s.uuids()
	disk := snapshotDisk(t, s.scenario)
	if len(disk) != 1+2*len(s.nodes) {
		t.Fatalf("pool holds %v, want %d volumes", disk, 1+2*len(s.nodes))
	}
	intact := func(what string) {
		t.Helper()
		if after := s.uuids(); !maps.Equal(after, before) {
			t.Errorf("%s: domains %v, were %v", what, after, before)
		}
		if after := snapshotDisk(t, s.scenario); !maps.Equal(after, disk) {
			t.Errorf("%s: volumes changed on disk:\n got %v\nwant %v", what, after, disk)
		}
		virsh(t, "net-info", s.cluster)
		virsh(t, "pool-info", s.cluster)
	}

	refused(t, "teardown, stdin not a terminal", s.milnerIn("", "teardown"), "refused", "not a terminal", "--yes")
	intact("after teardown with stdin not a terminal")
	refused(t, "teardown --confirm <stack name>", s.milner("teardown", "--confirm", milnerStack), "refused", "not the cluster name")
	intact("after teardown --confirm with the stack name")
	refused(t, "teardown with a target", s.milner("teardown", "--confirm", s.cluster, "w-1"), "takes no target")
	intact("after teardown with a target")

	r := s.mustMilner("teardown", "--confirm", s.cluster)
	if !strings.Contains(r.stdout, "(protected)") {
		t.Errorf("teardown did not list the protected resources:\n%s", r.stdout)
	}
	if got := s.domains(); len(got) > 0 {
		t.Errorf("domains left: %v", got)
	}
	for _, n := range s.nodes {
		for _, kind := range []string{"os", "data"} {
			if p := s.vol(n.Name, kind); fileExists(p) {
				t.Errorf("volume %s left on disk", p)
			}
		}
	}
	for p := range disk {
		if fileExists(filepath.Join(s.dir, "pool", p)) {
			t.Errorf("volume %s left on disk", p)
		}
	}
	if _, err := virshOut("net-info", s.cluster); err == nil {
		t.Errorf("network %s left", s.cluster)
	}
	if _, err := virshOut("pool-info", s.cluster); err == nil {
		t.Errorf("pool %s left", s.cluster)
	}
	if res := s.stateIDs(tDomain); len(res) > 0 {
		t.Errorf("state still holds domains %v", res)
	}
	// Nothing of the stack is left to destroy: a second teardown is a no-op.
	s.mustMilner("teardown", "--confirm", s.cluster)
}

// virshNames runs a virsh list command and returns the names of the
// scenario's objects in it (the cluster's name or its prefix), sorted: other
// tests and benchmarks share the host.
func (s *milnerScenario) virshNames(args ...string) []string {
	s.t.Helper()
	var names []string
	for _, n := range strings.Fields(virsh(s.t, args...)) {
		if n == s.cluster || strings.HasPrefix(n, s.cluster+"-") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// 5. Ownership: every domain carries its stack's owner tag in its libvirt
// description; with the state moved away, a domain retagged for another
// stack is refused with a rename, never offered for adoption, while the
// untouched ones still are.
func TestMilnerOwnership(t *testing.T) {
	s := newMilnerScenario(t, "m-owner", 25)
	s.mustMilner("up", "--yes")
	before := s.uuids()
	state, away := filepath.Join(s.dir, "state"), filepath.Join(s.dir, "state.away")
	if err := os.Rename(state, away); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fileExists(away) {
			_ = os.RemoveAll(state)
			_ = os.Rename(away, state)
		}
	})
	first := s.domain(s.nodes[0].Name)
	for _, n := range s.nodes {
		if desc := strings.TrimSpace(virsh(t, "desc", s.domain(n.Name))); desc != "milner-owner=milner/"+milnerStack {
			t.Errorf("domain %s description %q, want the owner tag", s.domain(n.Name), desc)
		}
	}
	virsh(t, "desc", first, "--config", "--live", "milner-owner=milner/someone-else")
	r := s.milner("up", "--yes")
	refused(t, "up beside another stack's domain", r, fmt.Sprintf("domain %q belongs to milner/someone-else", first), "own milner:cluster.name")
	if strings.Contains(r.out(), "--node "+s.nodes[0].Name+" --id") {
		t.Errorf("another stack's domain was offered for adoption:\n%s", r.out())
	}
	other := s.nodes[1].Name
	if want := fmt.Sprintf("milner adopt --stack %s --node %s --id %s", milnerStack, other, before[s.domain(other)]); !strings.Contains(r.out(), want) {
		t.Errorf("this stack's own domain is not offered for adoption (%q):\n%s", want, r.out())
	}
	virsh(t, "desc", first, "--config", "--live", "milner-owner=milner/"+milnerStack)
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, state); err != nil {
		t.Fatal(err)
	}
	s.hasNoChanges("up after the restore", s.mustMilner("up", "--yes"))
}

// 3b. Recover from lost state: the state of a live stack is deleted. `milner
// up` refuses and names `milner adopt --stack it --all`; that records every
// live object in the stack file; the next up imports them all without
// touching a domain or a disk (same UUIDs, same volume inodes); then the
// stack previews no change.
func TestMilnerRecoverLostState(t *testing.T) {
	s := newMilnerScenario(t, "m-lost", 30)
	s.mustMilner("up", "--yes")
	before := s.uuids()
	disk := snapshotDisk(t, s.scenario)
	ids := map[string]map[string]string{}
	for _, typ := range []string{gate.TypeLibvirtDomain, gate.TypeLibvirtVolume, gate.TypeLibvirtNetwork, gate.TypeLibvirtPool} {
		ids[typ] = s.stateIDs(typ)
	}

	if err := os.RemoveAll(filepath.Join(s.dir, "state")); err != nil {
		t.Fatal(err)
	}
	all := "milner adopt --stack it --all"
	refused(t, "up on lost state", s.milner("up", "--yes"), "holds no substrate resource", all)

	r := s.mustMilner(strings.Fields(all)[1:]...)
	if !strings.Contains(r.stdout, "will be imported (2 domains, 7 pools, networks and volumes)") {
		t.Errorf("adopt --all: stdout lacks the count of what it adopts:\n%s", r.out())
	}
	up := s.mustMilner("up", "--yes")
	for _, op := range []string{"replace", "delete"} {
		if strings.Contains(up.stdout, " "+op+" ") {
			t.Errorf("the up after adoption plans a %s:\n%s", op, up.stdout)
		}
	}
	for typ, want := range ids {
		if got := s.stateIDs(typ); !maps.Equal(got, want) {
			t.Errorf("%s in state after recovery: %v, before the loss %v", typ, got, want)
		}
	}
	if after := s.uuids(); !maps.Equal(after, before) {
		t.Errorf("domains after recovery: %v, were %v", after, before)
	}
	if after := snapshotDisk(t, s.scenario); !maps.Equal(after, disk) {
		t.Errorf("volumes changed on disk:\n got %v\nwant %v", after, disk)
	}
	res, err := s.stack.Resources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Type != gate.TypeLibvirtDomain && ids[r.Type] != nil && !r.Protect {
			t.Errorf("%s was imported unprotected", r.Name())
		}
	}
	s.mustMilner("preview", "--expect-no-changes")
	s.requireNoChanges("engine preview after recovery", s.preview(true))
}
