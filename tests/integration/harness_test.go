//go:build integration

// Package integration runs the Milner program on the real Pulumi engine with
// the real libvirt provider against this machine's libvirtd: what happens,
// not only what the program asks for. Every scenario has its own cluster
// name (so its own pool, network and domain names), its own isolated subnet,
// pool directory and file backend, and removes all of it when it ends, also
// on failure.
//
// Needs: scripts/tools.sh (the CLI and plugin in .tools/bin) and
// scripts/libvirt-up.sh (libvirtd on qemu:///system). Run as root:
//
//	go test -tags integration ./tests/integration/ -v
package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"go.yaml.in/yaml/v3"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/tests/harness"
)

const (
	uri = "qemu:///system"
	// base holds every scenario's pool directory, boot image and state.
	base = "/var/lib/milner/it"
	// Type tokens of the libvirt resources.
	tPool    = gate.TypeLibvirtPool
	tNetwork = gate.TypeLibvirtNetwork
	tVolume  = gate.TypeLibvirtVolume
	tDomain  = gate.TypeLibvirtDomain
)

// repo is the repository root.
var repo = func() string {
	r, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return r
}()

func TestMain(m *testing.M) {
	for _, bin := range []string{"pulumi-resource-libvirt"} {
		if _, err := os.Stat(filepath.Join(repo, ".tools", "bin", bin)); err != nil {
			fmt.Fprintf(os.Stderr, "integration: %v (run scripts/tools.sh)\n", err)
			os.Exit(1)
		}
	}
	if out, err := exec.Command("virsh", "-c", uri, "version").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: libvirtd does not answer (run scripts/libvirt-up.sh): %v: %s\n", err, out)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// node is one node of a scenario's config.
type node struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	VCPU    int    `json:"vcpu"`
	Memory  int    `json:"memoryMiB"`
	OSDisk  int    `json:"osDiskGiB"`
	Data    int    `json:"dataDiskGiB"`
	Address string `json:"address"`
	MAC     string `json:"mac"`
	AdoptID string `json:"adoptId,omitempty"`
}

// scenario is one test's cluster: its names, paths, config and stack.
type scenario struct {
	t       *testing.T
	cluster string // names the pool, the network and every domain and volume
	dir     string // pool, boot image and state
	subnet  int    // the third octet of 10.199.<subnet>.0/24
	talos   string
	boot    string // bootImage
	nodes   []node
	stack   *engine.Stack
	url     string // the backend, when not the scenario's own file backend
	// stopAfter is milner:stopAfter ("": substrate, the machines alone).
	stopAfter string
	// extra are further config keys (full names) and their values.
	extra map[string]any
	// clusterExtra are further keys of milner:cluster.
	clusterExtra map[string]any
}

// newScenario prepares a two-node cluster (one control plane, one worker, at
// the smallest sizes validation allows) on 10.199.<subnet>.0/24 and opens
// its stack. Cleanup is registered before anything is created.
func newScenario(t *testing.T, id string, subnet int) *scenario {
	t.Helper()
	return newScenarioOn(t, id, subnet, "")
}

// newScenarioOn is newScenario on the backend url ("": the scenario's own
// file backend).
func newScenarioOn(t *testing.T, id string, subnet int, url string) *scenario {
	t.Helper()
	s := &scenario{
		t:       t,
		cluster: "milner-it-" + id,
		dir:     filepath.Join(base, id),
		subnet:  subnet,
		talos:   talosFrom,
		url:     url,
	}
	s.boot = filepath.Join(s.dir, "boot.qcow2")
	s.nodes = []node{
		{Name: "cp-1", Role: "controlplane", VCPU: 1, Memory: 2048, OSDisk: 10, Data: 1, Address: s.addr(11), MAC: s.mac(0x11)},
		{Name: "w-1", Role: "worker", VCPU: 1, Memory: 1024, OSDisk: 10, Data: 1, Address: s.addr(21), MAC: s.mac(0x21)},
	}
	// The progress log closes after the cleanup below has used it.
	progress := harness.LogWriter(t)
	// Leftovers of an interrupted earlier run would make every create fail.
	s.virshCleanup()
	t.Cleanup(s.cleanup)
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", s.boot, "64M")

	// The scenario's directory is a project of its own: the repo's
	// Pulumi.yaml and the scenario's Pulumi.it.yaml, state in a file
	// backend beside them, the repo's pinned tools.
	project, err := os.ReadFile(filepath.Join(repo, "Pulumi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "Pulumi.yaml"), project, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(repo, ".tools"), filepath.Join(s.dir, ".tools")); err != nil {
		t.Fatal(err)
	}
	s.writeStackFile()
	st, err := engine.Open(context.Background(), engine.Options{
		Stack:      itStack,
		Dir:        s.dir,
		Backend:    s.backend(),
		Passphrase: itPassphrase,
		Progress:   progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.stack = st
	return s
}

// The stack name and passphrase of every scenario.
const (
	itStack      = "it"
	itPassphrase = "milner-it"
)

// backend is the scenario's backend: its own file backend unless it was
// given one.
func (s *scenario) backend() string {
	if s.url != "" {
		return s.url
	}
	return "file://" + filepath.Join(s.dir, "state")
}

// stackFile is the scenario's Pulumi.it.yaml.
func (s *scenario) stackFile() string {
	return filepath.Join(s.dir, "Pulumi."+itStack+".yaml")
}

// writeStackFile writes the scenario's current config as a block-style
// stack file, the shape of a committed Pulumi.<stack>.yaml, keeping the
// passphrase salt the engine added to it.
func (s *scenario) writeStackFile() {
	s.t.Helper()
	cfg := map[string]any{}
	for k, v := range s.config() {
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v // a plain string (milner:stopAfter)
		}
		cfg[k] = val
	}
	doc := map[string]any{"config": cfg}
	if old, err := os.ReadFile(s.stackFile()); err == nil {
		var prev struct {
			Salt string `yaml:"encryptionsalt"`
		}
		if yaml.Unmarshal(old, &prev) == nil && prev.Salt != "" {
			doc["encryptionsalt"] = prev.Salt
		}
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(s.stackFile(), b, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *scenario) addr(host int) string { return fmt.Sprintf("10.199.%d.%d", s.subnet, host) }
func (s *scenario) mac(b int) string     { return fmt.Sprintf("52:54:00:c7:%02x:%02x", s.subnet, b) }

// domain is the libvirt name of a node's domain; vol the path of a volume.
func (s *scenario) domain(n string) string { return s.cluster + "-" + n }
func (s *scenario) vol(n, kind string) string {
	return filepath.Join(s.dir, "pool", s.cluster+"-"+n+"-"+kind+".qcow2")
}

// config is the scenario's overrides of Pulumi.local.yaml: everything that
// names or places something, so scenarios never touch each other or the
// local stack.
func (s *scenario) config() map[string]string {
	j := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			s.t.Fatal(err)
		}
		return string(b)
	}
	stopAfter := s.stopAfter
	if stopAfter == "" {
		stopAfter = "substrate"
	}
	cluster := map[string]any{
		"name": s.cluster, "talosVersion": s.talos, "configContract": "v1.9", "kubernetesVersion": kubeFrom, "vip": s.addr(240),
	}
	maps.Copy(cluster, s.clusterExtra)
	cfg := map[string]string{
		"milner:cluster": j(cluster),
		"milner:substrate": j(map[string]any{"kind": "libvirt", "libvirt": map[string]any{
			"uri": uri, "domainType": "qemu", "poolPath": filepath.Join(s.dir, "pool"), "bootImage": s.boot,
		}}),
		"milner:network": j(map[string]any{
			"mode": "isolated", "cidr": fmt.Sprintf("10.199.%d.0/24", s.subnet),
			"dhcpRange": map[string]any{"start": s.addr(100), "end": s.addr(199)},
		}),
		"milner:nodes":     j(s.nodes),
		"milner:stopAfter": stopAfter,
	}
	for k, v := range s.extra {
		cfg[k] = j(v)
	}
	return cfg
}

// apply writes the scenario's current config to its stack file.
func (s *scenario) apply() { s.writeStackFile() }

// up runs `up` and fails the test if it fails.
func (s *scenario) up() *engine.Result {
	s.t.Helper()
	start := time.Now()
	r, err := s.stack.Up(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("up: %v in %s", r.Summary, time.Since(start).Round(time.Millisecond))
	return r
}

// preview runs a preview and fails the test if it fails.
func (s *scenario) preview(refresh bool) *engine.Result {
	s.t.Helper()
	r, _, err := s.stack.Preview(context.Background(), engine.PlanOptions{Refresh: refresh})
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// requireNoChanges fails unless r changes nothing.
func (s *scenario) requireNoChanges(what string, r *engine.Result) {
	s.t.Helper()
	if ch := r.Changes(); len(ch) > 0 {
		s.t.Fatalf("%s: want no changes, got %s", what, steps(ch))
	}
	for op, n := range r.Summary {
		if op != "same" && n > 0 {
			s.t.Fatalf("%s: want only unchanged resources, summary is %v", what, r.Summary)
		}
	}
}

// stateIDs returns the ids of the live resources of one type in state, by
// logical name: a pending replacement (an interrupted delete-before-replace
// deleted it; the next up creates it) is not live.
func (s *scenario) stateIDs(typ string) map[string]string {
	s.t.Helper()
	ids := map[string]string{}
	for _, r := range s.exported().Resources {
		if string(r.Type) == typ && !r.PendingReplacement {
			ids[r.URN.Name()] = string(r.ID)
		}
	}
	return ids
}

// exported is the stack's state as `pulumi stack export` (the pinned CLI,
// not milner) reads it, pending operations and replacements included.
func (s *scenario) exported() apitype.DeploymentV3 {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(repo, ".tools", "bin", "pulumi"), "--non-interactive", "stack", "export", "--stack", itStack)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), engine.BackendEnv+"="+s.backend(), engine.PassphraseEnv+"="+itPassphrase, "PULUMI_SKIP_UPDATE_CHECK=true")
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("pulumi stack export: %v: %s", err, out)
	}
	var dep apitype.UntypedDeployment
	var state apitype.DeploymentV3
	if err := json.Unmarshal(out, &dep); err != nil {
		s.t.Fatalf("pulumi stack export: %v", err)
	}
	if err := json.Unmarshal(dep.Deployment, &state); len(dep.Deployment) > 0 && err != nil {
		s.t.Fatalf("pulumi stack export: %v", err)
	}
	return state
}

// cleanup removes everything the scenario made: through the engine first
// (unprotect, destroy), then whatever is left in libvirt, by name.
func (s *scenario) cleanup() {
	if s.stack != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := s.stack.UnprotectAll(ctx); err != nil {
			s.t.Logf("cleanup: %v", err)
		}
		if _, err := s.stack.Destroy(ctx); err != nil {
			s.t.Logf("cleanup: %v", err)
		}
	}
	s.virshCleanup()
}

// virshCleanup removes the scenario's domains, network, pool and directory
// from libvirt and disk. Each step is best effort: what is not there is fine.
func (s *scenario) virshCleanup() {
	try := func(args ...string) string {
		out, _ := virshOut(args...) //nolint:errcheck // best effort, see above
		return out
	}
	for _, d := range strings.Fields(try("list", "--all", "--name")) {
		if strings.HasPrefix(d, s.cluster+"-") {
			try("destroy", d)
			try("undefine", d, "--nvram")
		}
	}
	try("net-destroy", s.cluster)
	try("net-undefine", s.cluster)
	for _, v := range strings.Fields(try("vol-list", s.cluster, "--name")) {
		try("vol-delete", v, "--pool", s.cluster)
	}
	try("pool-destroy", s.cluster)
	try("pool-undefine", s.cluster)
	if err := os.RemoveAll(s.dir); err != nil {
		s.t.Logf("cleanup: %v", err)
	}
}

// virshOut runs virsh and returns its trimmed stdout.
func virshOut(args ...string) (string, error) {
	var stderr strings.Builder
	cmd := exec.Command("virsh", append([]string{"-c", uri}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("virsh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// virsh runs virsh and fails the test if it fails.
func virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := virshOut(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// run runs a command and fails the test if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// defineOutsidePulumi takes a node's domain out of Pulumi's hands (gone
// from libvirt, then from state through a refresh) and defines it again by
// hand with virsh: the same shape, a new UUID, autostarted and running, as
// an operator would. It returns the domain's name and its new UUID.
func (s *scenario) defineOutsidePulumi(node string) (dom, uuid string) {
	s.t.Helper()
	dom = s.domain(node)
	xml := virsh(s.t, "dumpxml", "--inactive", dom)
	virsh(s.t, "destroy", dom)
	virsh(s.t, "undefine", dom)
	if _, err := s.stack.Refresh(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	if id, ok := s.stateIDs(tDomain)[dom]; ok {
		s.t.Fatalf("domain %s still in state as %s after refresh", dom, id)
	}
	xml = regexp.MustCompile(`\s*<uuid>[^<]*</uuid>`).ReplaceAllString(xml, "")
	file := filepath.Join(s.dir, dom+".xml")
	if err := os.WriteFile(file, []byte(xml), 0o644); err != nil {
		s.t.Fatal(err)
	}
	virsh(s.t, "define", file)
	virsh(s.t, "autostart", dom)
	virsh(s.t, "start", dom)
	return dom, virsh(s.t, "domuuid", dom)
}

// domains returns the scenario's domain names in libvirt, sorted.
func (s *scenario) domains() []string {
	out := virsh(s.t, "list", "--all", "--name")
	var ds []string
	for _, d := range strings.Fields(out) {
		if strings.HasPrefix(d, s.cluster+"-") {
			ds = append(ds, d)
		}
	}
	slices.Sort(ds)
	return ds
}

// inode returns a file's inode number: a recreated volume has a new one.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// steps formats steps for failure messages.
func steps(ss []gate.Step) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "\n  %s %s %s keys=%v diffs=%v failed=%v", s.Op, s.Type, s.Name(), s.Keys, s.Diffs, s.Failed)
	}
	return b.String()
}

// The Talos and Kubernetes releases the scenarios' clusters are created
// on, as the dev and prod clusters were (contract v1.9), before any
// `milner upgrade`; the Talos API doubles run talosFrom.
const (
	talosFrom = "v1.9.5"
	kubeFrom  = "v1.32.3"
)
