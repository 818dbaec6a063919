//go:build integration

package integration

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"go.yaml.in/yaml/v3"
	"k8s.io/client-go/kubernetes"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/clusterapi"
	"github.com/milner/milner/tests/harness"
	"github.com/milner/milner/tests/talosapi"
)

// talosNetnsEnv marks the re-run of a Talos-layer scenario inside its
// network namespace.
const talosNetnsEnv = "MILNER_TALOS_NETNS"

// The Talos layer's scenario: its id (cluster milner-it-tlayer) and subnet.
const (
	tlayerID     = "tlayer"
	tlayerSubnet = 47
)

// inTalosNamespace re-runs the calling test in a fresh network namespace
// (lo up, each node's address, the VIP) and returns false, or returns true
// when already in it. The node addresses are on the namespace's loopback:
// this kernel has no dummy interface module (`ip link add type dummy`
// answers "Unknown device type"), and lo keeps them as private: reachable
// inside the namespace, routed nowhere else. libvirt is reached over its
// unix socket; the state is a file backend.
func inTalosNamespace(t *testing.T, addrs ...netip.Addr) bool {
	t.Helper()
	if harness.InNetns(t, talosNetnsEnv) {
		return true
	}
	ns := harness.NewNetns(t, "milner-talos")
	for _, a := range addrs {
		harness.IP(t, "-n", ns, "addr", "add", a.String()+"/32", "dev", "lo")
	}
	harness.Rerun(t, talosNetnsEnv, ns, 80*time.Minute, "ip", "netns", "exec", ns)
	return false
}

// talosLayer is the scenario's cluster: the libvirt substrate for real,
// one Talos API double per node on its own address:50000, and the
// cluster's API server on the VIP once the first control plane has its
// config.
type talosLayer struct {
	*milnerScenario
	c   *talosapi.Cluster
	api chan *clusterapi.API
	// operatorResets are the Reset calls the scenario sent as the operator
	// (a restore runbook's EPHEMERAL wipes): milner sends none.
	operatorResets talosapi.Journal
	// bootDelay is vmsNotYetBooted's (0: the doubles are on at once).
	bootDelay time.Duration
	// domainStarted is when each first node's domain was seen running
	// (bootWithDomains), guarded by startedMu.
	startedMu     sync.Mutex
	domainStarted map[string]time.Time
}

// milnerResets are the Reset calls the nodes received that the scenario
// did not send as the operator.
func (s *talosLayer) milnerResets() talosapi.Journal {
	return slices.DeleteFunc(s.c.Journal().Calls("Reset"), func(c talosapi.Entry) bool {
		return slices.ContainsFunc(s.operatorResets, func(o talosapi.Entry) bool { return o.Node == c.Node && o.Time.Equal(c.Time) })
	})
}

// TestTalosLayerOnRealPlugin: the Talos layer through the real Talos
// plugin (pulumi-resource-talos 0.7.1, scripts/tools.sh talos) on the real
// engine, driven by `milner` as a user runs it, with stacks.Program's
// substrate real (libvirt, an isolated network) and each node's Talos API
// a tests/talosapi double on the node's own address. In order, on one
// cluster (one control plane, one worker):
//
//  0. staged bring-up, its first half: `up` with stopAfter: substrate
//     creates the domains alone; nothing is sent to a node, which waits in
//     maintenance mode;
//  1. from empty (the Talos layer on those waiting nodes): the secrets
//     once, each first config in maintenance mode, one bootstrap on the
//     control plane, kubeconfig and talosconfig only in secret envelopes in
//     the backend, the health check passed (against a real kube-apiserver
//     on the VIP);
//  2. kubeconfig renewal: the first kubeconfig's client certificate
//     expires within the provider's 720h window; the preview plans the
//     kubeconfig's update alone, the up asks cp-1 for a new one, no
//     config is applied;
//  3. no-op: the preview plans nothing and the up sends no
//     ApplyConfiguration at all, not even a dry run;
//  4. one patch value on one node (milner:workloads.dedicatedNodes: w-1's
//     labels and taint): only w-1's apply is updated, in place, live; no
//     ApplyConfiguration reaches cp-1;
//  5. a change that needs a reboot (w-1 runs a hand-applied machine.env the
//     stack's config drops): staged, never rebooted, pending in the
//     preview and in `milner status`;
//  6. cp-1 unreachable at plan time with its config changed: the preview
//     reports it staged, never live;
//  7. `milner up --replace w-1` (its memory changed): the graceful Shutdown
//     reaches w-1 alone, only w-1's domain is new, the applies are kept and
//     nothing is applied again (the OS disk kept the config);
//  8. `milner up --replace w-1 --os-disk`: Shutdown to w-1 alone, the
//     fresh OS disk's first config taken in maintenance mode (AUTO, no
//     client certificate), the data volume kept;
//  9. a Talos version bump: updates of the applies only, refused by
//     preview and up while the nodes run the old version, `milner upgrade`
//     upgrades each node once and records the configs (every apply
//     NO_REBOOT), nothing replaced, a no-op after;
//  10. recover after state loss, w-1 running a hand-applied machine.env
//     (a change only a reboot applies, as in step 5): `secrets export`,
//     the state removed, `up` refused, `secrets import`, `adopt --all`
//     (the bootstrap recorded on etcd's members), then `up` with w-1
//     unreachable while its preview decides the modes and back once the
//     update applies: w-1 decided no_reboot (never auto), which Talos
//     refuses, so the up stops naming w-1 and nothing reboots; the next
//     `up` stages w-1's change. No Bootstrap call, cp-1's apply NO_REBOOT,
//     the bundle and domains as before, no bootstrap in state, and a
//     no-op after;
//  11. the apps layer added to the recovered stack with two OIDC group
//     bindings (no storage, no app): both are ClusterRoleBindings of the
//     prefixed groups on the cluster's API server; one removed from config
//     is removed from the cluster, the other stays the same object.
//
// No node is ever sent Reset or Reboot.
//
// What each step showed failing, with its fix reverted (153 s in its
// namespace): in step 1 the one-secrets-bundle rule asks each VM in state
// with the provider's maintenance probe and counts only one that does not
// answer in maintenance mode; before, it counted every VM and refused this
// up. In step 2 the double issues the kubeconfig for 100 h and the renewal
// asks cp-1 for a year's. Step 3 fails with the recorded-config rule of
// internal/applymode reverted (four dry runs). In step 10, with the
// bootstrap imported, as before, the preview fails in the plugin
// (docs/runbooks/adopt.md). In step 11, before the apps' kubeconfig had the
// same dependencies in preview and up, the up failed "violates plan:
// dependencies changed". The preview shows each node's decided mode: the
// real plugin leaves resolvedApplyMode unknown until the apply, so the
// report reads the mode milner sends.
func TestTalosLayerOnRealPlugin(t *testing.T) {
	requireTalosTools(t)
	nodes := []tnode{{"cp-1", 11, true}, {"w-1", 21, false}}
	if os.Getenv(talosNetnsEnv) == "" {
		harness.Milner(t, repo) // built outside, where the module cache is reachable
	}
	if !inTalosNamespace(t, nodes[0].addr(tlayerSubnet), nodes[1].addr(tlayerSubnet), netip.AddrFrom4([4]byte{10, 199, tlayerSubnet, 240})) {
		return
	}
	s := newTalosLayer(t, tlayerID, tlayerSubnet, nodes)
	// cp-1 takes pods, so that a dedicated w-1 leaves a node for the rest
	// (config refuses a dedication that leaves none).
	s.clusterExtra = map[string]any{"allowSchedulingOnControlPlanes": true}
	s.apply()
	ctx := context.Background()
	cp1, w1 := s.c.Node("cp-1"), s.c.Node("w-1")

	step := func(name string, f func(t *testing.T, mark int)) { s.step(t, name, f) }

	step("staged bring-up: the substrate alone", func(t *testing.T, mark int) {
		s.stopAfter = "substrate"
		s.apply()
		s.mustMilner("up", "--yes")
		counts := map[string]int{}
		for _, r := range s.exported().Resources {
			counts[string(r.Type)]++
		}
		if counts[tDomain] != 2 || counts[gate.TypeTalosSecrets]+counts[gate.TypeConfigApply] > 0 {
			t.Errorf("state after the substrate's up: %v, want 2 domains and no Talos resource", counts)
		}
		if applies := s.c.Journal()[mark:].Applies(); len(applies) > 0 {
			t.Errorf("the substrate's up sent ApplyConfiguration:\n%s", strings.Join(applies.Strings(), "\n"))
		}
		for _, n := range []*talosapi.Node{cp1, w1} {
			if n.Config() != nil {
				t.Errorf("%s left maintenance mode in the substrate's up", n.Name())
			}
		}
		// The Talos layer declared again: the next step's up applies it to
		// the nodes waiting in maintenance mode.
		s.stopAfter = "talos"
		s.apply()
	})

	step("from empty", func(t *testing.T, mark int) {
		s.mustMilner("up", "--yes")
		j := s.c.Journal()[mark:]
		counts := map[string]int{}
		for _, r := range s.exported().Resources {
			counts[string(r.Type)]++
		}
		for typ, n := range map[string]int{gate.TypeTalosSecrets: 1, gate.TypeTalosBootstrap: 1, gate.TypeConfigApply: 2, tDomain: 2} {
			if counts[typ] != n {
				t.Errorf("state holds %d %s, want %d", counts[typ], typ, n)
			}
		}
		for _, n := range []*talosapi.Node{cp1, w1} {
			applies := j.On(n.Name()).Applies()
			if len(applies) != 1 || !applies[0].Client.Insecure || applies[0].Mode() != machine.ApplyConfigurationRequest_AUTO || applies[0].Err != nil {
				t.Errorf("%s: want one first config, AUTO, in maintenance mode (no client certificate), got:\n%s", n.Name(), strings.Join(applies.Strings(), "\n"))
			}
			if n.Config() == nil {
				t.Errorf("%s runs no config after the up", n.Name())
			}
		}
		boots := j.Calls("Bootstrap").Succeeded()
		if len(boots) != 1 || boots[0].Node != "cp-1" {
			t.Errorf("want exactly one successful Bootstrap, on cp-1, got:\n%s", strings.Join(j.Calls("Bootstrap").Strings(), "\n"))
		}
		if b := j.On("w-1").Calls("Bootstrap"); len(b) > 0 {
			t.Errorf("a worker was sent Bootstrap:\n%s", strings.Join(b.Strings(), "\n"))
		}
		// The health check ran: its Talos calls on both nodes, and its
		// reads of the cluster through the kubeconfig Talos handed out.
		// (Its etcd and kubelet service checks ask control planes only:
		// talos pkg/cluster/check default.go, WithNodeTypes.)
		if len(j.On("cp-1").Calls("ServiceList")) == 0 {
			t.Errorf("cp-1: no ServiceList call: the health check did not reach it")
		}
		for _, n := range []string{"cp-1", "w-1"} {
			if len(j.On(n).Calls("Memory")) == 0 {
				t.Errorf("%s: no Memory call: the health check did not reach it:\n%s", n, strings.Join(j.On(n).Strings(), "\n"))
			}
		}
		api := s.clusterAPI()
		reads, err := api.Reads()
		if err != nil {
			t.Fatal(err)
		}
		listed := false
		for user, rs := range reads {
			t.Logf("kube-apiserver audit: %s: %d requests (%s ...)", user, len(rs), strings.Join(rs[:min(len(rs), 6)], ", "))
			listed = listed || slices.Contains(rs, "list nodes") && slices.Contains(rs, "list pods")
		}
		if !listed {
			t.Errorf("no client listed the nodes and pods: the health check's Kubernetes checks did not run")
		}
		s.secretOutputsOnlyInEnvelopes(ctx)
	})

	step("kubeconfig renewal", func(t *testing.T, mark int) {
		// The state's client certificate expires within the provider's
		// renewal window (720h): its ModifyPlan plans a new one, which Talos
		// now issues for its own lifetime (a year).
		s.c.SetKubeconfigTTL(0)
		old := s.kubeconfigCertificate(ctx)
		p := s.mustMilner("preview")
		if !strings.Contains(p.stdout, "update  milner-it-tlayer-kubeconfig") || strings.Contains(p.stdout, "-apply") {
			t.Errorf("preview: want the kubeconfig's renewal alone:\n%s", p.out())
		}
		s.mustMilner("up", "--yes")
		renewed := s.kubeconfigCertificate(ctx)
		if !renewed.NotAfter.After(old.NotAfter.Add(720*time.Hour)) || renewed.SerialNumber.Cmp(old.SerialNumber) == 0 {
			t.Errorf("the kubeconfig's client certificate was not renewed: expires %v, was %v", renewed.NotAfter, old.NotAfter)
		}
		j := s.c.Journal()[mark:]
		if got := j.Calls("Kubeconfig").Nodes(); !slices.Equal(got, []string{"cp-1"}) {
			t.Errorf("Kubeconfig asked of %v, want cp-1", got)
		}
		if a := j.Applies(); len(a) > 0 {
			t.Errorf("the renewal applied a config:\n%s", strings.Join(a.Strings(), "\n"))
		}
	})

	step("no-op", func(t *testing.T, mark int) {
		if p := s.mustMilner("preview"); !strings.Contains(p.stdout, "no changes") {
			t.Errorf("preview: want no changes:\n%s", p.out())
		}
		s.hasNoChanges("up", s.mustMilner("up", "--yes"))
		j := s.c.Journal()[mark:]
		if a := j.Calls("ApplyConfiguration"); len(a) > 0 {
			t.Errorf("a no-op sent ApplyConfiguration:\n%s", strings.Join(a.Strings(), "\n"))
		}
	})

	step("one patch value on one node", func(t *testing.T, mark int) {
		cpConfig := cp1.Config()
		s.extra = map[string]any{"milner:workloads": workloads("w-1")}
		s.apply()
		p := s.mustMilner("preview")
		// The real plugin leaves resolvedApplyMode unknown in this preview;
		// the report shows the mode milner decided and sends, which the
		// provider applies as given.
		if !strings.Contains(p.stdout, "update  w-1-apply") || strings.Contains(p.stdout, "cp-1-apply") || !strings.Contains(p.stdout, "w-1: applies live") {
			t.Errorf("preview: want w-1's apply alone updated, live:\n%s", p.out())
		}
		before := s.stateIDs(gate.TypeConfigApply)
		s.mustMilner("up", "--yes")
		j := s.c.Journal()[mark:]
		t.Logf("journal of the change (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		applies := j.Applies()
		if len(applies) != 1 || applies[0].Node != "w-1" || applies[0].Mode() != machine.ApplyConfigurationRequest_NO_REBOOT || applies[0].Err != nil {
			t.Errorf("want one apply, w-1's, NO_REBOOT, got:\n%s", strings.Join(applies.Strings(), "\n"))
		}
		if got := j.Calls("ApplyConfiguration").Nodes(); !slices.Equal(got, []string{"w-1"}) {
			t.Errorf("ApplyConfiguration (dry runs included) reached %v, want w-1 alone", got)
		}
		if !strings.Contains(string(w1.Config()), "npcs") {
			t.Errorf("w-1 does not run the labels")
		}
		if string(cp1.Config()) != string(cpConfig) {
			t.Errorf("cp-1's running config changed")
		}
		if after := s.stateIDs(gate.TypeConfigApply); !maps.Equal(after, before) {
			t.Errorf("applies were replaced: %v, were %v", after, before)
		}
		if e := j.Events("reboot"); len(e) > 0 {
			t.Errorf("a node rebooted:\n%s", strings.Join(e.Strings(), "\n"))
		}
	})

	step("a change that needs a reboot is staged", func(t *testing.T, _ int) {
		// An operator set machine.env on w-1 by hand and rebooted it into
		// it (talosctl apply-config --mode=reboot); the stack's config
		// does not have it, and drops w-1's labels: a change Talos can
		// only apply with a reboot (Runtime.CanApplyImmediate: .machine.env
		// is not among what applies live).
		s.operatorApply(ctx, w1, `{"machine":{"env":{"GODEBUG":"x509sha1=1"}}}`)
		mark := len(s.c.Journal())
		running := w1.Config()
		s.extra = map[string]any{"milner:workloads": workloads()}
		s.apply()
		if p := s.mustMilner("preview"); !strings.Contains(p.stdout, "update  w-1-apply") || !strings.Contains(p.stdout, "w-1: staged") {
			t.Errorf("preview: want w-1 staged:\n%s", p.out())
		}
		s.mustMilner("up", "--yes")
		j := s.c.Journal()[mark:]
		applies := j.Applies()
		if len(applies) != 1 || applies[0].Node != "w-1" || applies[0].Mode() != machine.ApplyConfigurationRequest_STAGED || applies[0].Err != nil {
			t.Errorf("want one apply, w-1's, STAGED, got:\n%s", strings.Join(applies.Strings(), "\n"))
		}
		if e := j.Events("reboot"); len(e) > 0 {
			t.Errorf("a node rebooted:\n%s", strings.Join(e.Strings(), "\n"))
		}
		if string(w1.Config()) != string(running) || !w1.Status().Pending {
			t.Errorf("w-1: want the old config running and the new one staged on its STATE partition")
		}
		if st := s.mustMilner("status"); !regexp.MustCompile(`w-1\s.*staged`).MatchString(st.stdout) {
			t.Errorf("milner status: want w-1's staged config shown pending:\n%s", st.out())
		}
	})

	step("a node unreachable at plan time is never reported live", func(t *testing.T, mark int) {
		if err := cp1.SetReachable(false); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cp1.SetReachable(true) }()
		s.extra = map[string]any{"milner:workloads": workloads("cp-1")}
		s.apply()
		p := s.milner("preview")
		// No answer: milner decides "staged" (applymode), and the report
		// says so. It must never say live or auto.
		if !strings.Contains(p.stdout, "update  cp-1-apply") || !strings.Contains(p.stdout, "cp-1: staged") {
			t.Errorf("preview: want cp-1's apply staged, never live or auto:\n%s", p.out())
		}
		if a := s.c.Journal()[mark:].Calls("ApplyConfiguration"); len(a) > 0 {
			t.Errorf("the preview sent ApplyConfiguration:\n%s", strings.Join(a.Strings(), "\n"))
		}
	})

	step("milner up --replace w-1", func(t *testing.T, mark int) {
		// The replaced domain boots from w-1's kept OS disk, so its Talos
		// comes back configured: the double powers on once the new domain
		// runs (the engine's create started it).
		s.extra = map[string]any{"milner:workloads": workloads()}
		s.nodes[1].Memory = 1536
		s.apply()
		domains, applies := s.uuids(), s.stateIDs(gate.TypeConfigApply)
		stop := s.bootWhenReplaced(w1, domains[s.domain("w-1")], false)
		up := s.mustMilner("up", "--yes", "--replace", "w-1")
		stop()
		j := s.c.Journal()[mark:]
		t.Logf("journal of the replace (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		if got := j.Calls("Shutdown").Nodes(); !slices.Equal(got, []string{"w-1"}) {
			t.Errorf("Shutdown reached %v, want w-1 alone", got)
		}
		after := s.uuids()
		if after[s.domain("w-1")] == "" || after[s.domain("w-1")] == domains[s.domain("w-1")] {
			t.Errorf("w-1's domain was not replaced: %v, was %v", after, domains)
		}
		if after[s.domain("cp-1")] != domains[s.domain("cp-1")] {
			t.Errorf("cp-1's domain changed: %v, was %v", after, domains)
		}
		// The OS disk survived, and with it the node's config: the apply
		// is kept, and nothing is sent to the node again.
		if got := s.stateIDs(gate.TypeConfigApply); !maps.Equal(got, applies) {
			t.Errorf("applies changed: %v, were %v", got, applies)
		}
		if a := j.Calls("ApplyConfiguration"); len(a) > 0 {
			t.Errorf("the replace sent ApplyConfiguration:\n%s", strings.Join(a.Strings(), "\n"))
		}
		if !w1.Status().Booted || w1.Config() == nil {
			t.Errorf("w-1 is not back with its config: %+v", w1.Status())
		}
		if strings.Contains(up.stdout, "cp-1-apply") {
			t.Errorf("the up touched cp-1's apply:\n%s", up.out())
		}
		s.hasNoChanges("up after the replace", s.mustMilner("up", "--yes"))
	})

	step("milner up --replace w-1 --os-disk", func(t *testing.T, mark int) {
		// A fresh OS disk holds no config: the new domain boots Talos into
		// maintenance mode, and its first config must be taken there.
		domains, applies := s.uuids(), s.stateIDs(gate.TypeConfigApply)
		data, osVol := s.vol("w-1", "data"), s.vol("w-1", "os")
		dataInode := inode(t, data)
		// Mark the OS volume's file old: a fresh volume has a new mtime
		// (an inode number can be reused).
		old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := os.Chtimes(osVol, old, old); err != nil {
			t.Fatal(err)
		}
		stop := s.bootWhenReplaced(w1, domains[s.domain("w-1")], true)
		s.mustMilner("up", "--yes", "--replace", "w-1", "--os-disk")
		stop()
		j := s.c.Journal()[mark:]
		t.Logf("journal of the --os-disk replace (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		if got := j.Calls("Shutdown").Nodes(); !slices.Equal(got, []string{"w-1"}) {
			t.Errorf("Shutdown reached %v, want w-1 alone", got)
		}
		a := j.Applies()
		if len(a) != 1 || a[0].Node != "w-1" || !a[0].Client.Insecure || a[0].Mode() != machine.ApplyConfigurationRequest_AUTO || a[0].Err != nil {
			t.Errorf("want one apply, w-1's first config in maintenance mode (AUTO, no client certificate), got:\n%s", strings.Join(a.Strings(), "\n"))
		}
		if w1.Config() == nil {
			t.Errorf("w-1 runs no config after the replace")
		}
		after := s.uuids()
		if after[s.domain("w-1")] == domains[s.domain("w-1")] || after[s.domain("cp-1")] != domains[s.domain("cp-1")] {
			t.Errorf("domains: %v, were %v; want w-1's alone new", after, domains)
		}
		if got := s.stateIDs(gate.TypeConfigApply); got["cp-1-apply"] != applies["cp-1-apply"] {
			t.Errorf("cp-1's apply changed: %v, were %v", got, applies)
		}
		if fi, err := os.Stat(osVol); err != nil || !fi.ModTime().After(old.Add(24*time.Hour)) {
			t.Errorf("the OS volume %s is not new: %v", osVol, err)
		}
		if inode(t, data) != dataInode {
			t.Errorf("the data volume %s was recreated", data)
		}
		s.hasNoChanges("up after the --os-disk replace", s.mustMilner("up", "--yes"))
	})

	step("a Talos version bump, then milner upgrade", func(t *testing.T, mark int) {
		domains, applies := s.uuids(), s.stateIDs(gate.TypeConfigApply)
		s.talos = "v1.9.6"
		s.boot = filepath.Join(s.dir, "boot-v1.9.6.qcow2")
		run(t, "qemu-img", "create", "-q", "-f", "qcow2", s.boot, "64M")
		s.apply()
		// The preview is refused too (the interlock is a layer rule), and
		// its delta is updates of the applies alone.
		p := s.milner("preview")
		refused(t, "preview while the nodes run v1.9.5", p, "milner upgrade --stack it", "[rule versions-interlock]")
		if regexp.MustCompile(`(?m)^\s+(create|replace|delete)\s`).MatchString(p.stdout) || !strings.Contains(p.stdout, "update  cp-1-apply") {
			t.Errorf("the bump's preview plans more than updates:\n%s", p.out())
		}
		refused(t, "up while the nodes run v1.9.5", s.milner("up", "--yes"), "milner upgrade --stack it")
		// (Deciding the apply modes sent dry runs, which change nothing.)
		if a := s.c.Journal()[mark:].Applies(); len(a) > 0 {
			t.Errorf("the refused up applied a config:\n%s", strings.Join(a.Strings(), "\n"))
		}
		// A pod a PodDisruptionBudget keeps on w-1: Talos v1.9 would evict
		// past the budget after its drain's 5 minutes and reboot w-1 with
		// the pod on it, so milner stops before sending w-1 its Upgrade,
		// naming the pod and the budget; w-1 is not rebooted.
		release := s.keepPodOn("w-1")
		w1Boot := w1.Status().BootID
		kept := s.milner("upgrade", "--yes")
		refused(t, "upgrade with a budget-kept pod on w-1", kept, "drain check", "pod kube-system/keeper", "PodDisruptionBudget kube-system/keeper")
		if u := s.c.Journal()[mark:].On("w-1").Calls("Upgrade"); len(u) > 0 {
			t.Errorf("w-1 was sent its Upgrade past the budget:\n%s", strings.Join(u.Strings(), "\n"))
		}
		if b := w1.Status().BootID; b != w1Boot {
			t.Errorf("w-1 rebooted (boot %s, was %s)", b, w1Boot)
		}
		release()
		var upgraded pipeline.Outcome
		decoded(t, "upgrade", s.mustMilner("upgrade", "--yes", "--json"), &upgraded)
		if upgraded.Stack != milnerStack || upgraded.Backend == "" || upgraded.Record == nil || !upgraded.Record.Applied {
			t.Errorf("upgrade --json: want stack %s and its record applied, got %+v", milnerStack, upgraded)
		}
		j := s.c.Journal()[mark:]
		t.Logf("journal of the upgrade (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		if got := j.Calls("Upgrade").Nodes(); len(got) != 2 || !slices.Contains(got, "cp-1") || !slices.Contains(got, "w-1") {
			t.Errorf("Upgrade reached %v, want each node once", got)
		}
		for _, n := range []*talosapi.Node{cp1, w1} {
			if v := n.Status().Version; v != "v1.9.6" {
				t.Errorf("%s runs %s after the upgrade, want v1.9.6", n.Name(), v)
			}
		}
		for _, a := range j.Applies() {
			if a.Mode() != machine.ApplyConfigurationRequest_NO_REBOOT || a.Err != nil {
				t.Errorf("the record's apply to %s: want NO_REBOOT, got %s", a.Node, a)
			}
		}
		if got := s.uuids(); !maps.Equal(got, domains) {
			t.Errorf("domains changed: %v, were %v", got, domains)
		}
		if got := s.stateIDs(gate.TypeConfigApply); !maps.Equal(got, applies) {
			t.Errorf("applies were replaced: %v, were %v", got, applies)
		}
		s.hasNoChanges("up after the upgrade", s.mustMilner("up", "--yes"))
	})

	step("recover after state loss", func(t *testing.T, mark int) {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			t.Fatal(err)
		}
		bundle, key := filepath.Join(s.dir, "bundle.age"), filepath.Join(s.dir, "key.txt")
		if err := os.WriteFile(key, []byte(id.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// An operator set machine.env on w-1 by hand and rebooted it into
		// it, as in step 5: the recovered stack's config drops it, a
		// change only a reboot applies.
		s.operatorApply(ctx, w1, `{"machine":{"env":{"GODEBUG":"x509sha1=1"}}}`)
		mark = len(s.c.Journal())
		var exported struct {
			Stack      string `json:"stack"`
			Out        string `json:"out"`
			Recipients int    `json:"recipients"`
		}
		decoded(t, "secrets export", s.mustMilner("secrets", "export", "--out", bundle, "--recipient", id.Recipient().String(), "--json"), &exported)
		if exported.Stack != milnerStack || exported.Out != bundle || exported.Recipients != 1 {
			t.Errorf("secrets export --json: %+v, want stack %s, out %s, 1 recipient", exported, milnerStack, bundle)
		}
		before := map[string]map[string]string{}
		for _, typ := range []string{gate.TypeTalosSecrets, tDomain} {
			before[typ] = s.stateIDs(typ)
		}
		if err := os.RemoveAll(filepath.Join(s.dir, "state")); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(s.dir, "state"), 0o700); err != nil {
			t.Fatal(err)
		}
		refused(t, "up on lost state", s.milner("up", "--yes"), "milner adopt --stack it --all")
		// The gated verbs of the recovery under --json: each prints its
		// outcome as one document (the progress and adopt's notes go to
		// stderr), a plan's with Pulumi's preview digest.
		var imported, adopted, previewed, recovered pipeline.Outcome
		decoded(t, "secrets import", s.mustMilner("secrets", "import", "--in", bundle, "--identity", key, "--json"), &imported)
		a := s.mustMilner("adopt", "--all", "--json")
		decoded(t, "adopt", a, &adopted)
		for verb, o := range map[string]pipeline.Outcome{"secrets import": imported, "adopt --all": adopted} {
			if o.Stack != milnerStack || o.Backend == "" || !o.Applied {
				t.Errorf("%s --json: want stack %s, its backend, applied; got %+v", verb, milnerStack, o)
			}
		}
		if !strings.Contains(a.stderr, "recorded milner:cluster.adoptBootstrap") {
			t.Errorf("adopt --all: want the bootstrap recorded from the control plane's etcd members:\n%s", a.out())
		}
		decoded(t, "preview", s.mustMilner("preview", "--json"), &previewed)
		steps := digestSteps(t, "preview", previewed)
		if len(steps) == 0 {
			t.Errorf("preview --json after adoption: no steps in Pulumi's digest")
		}
		for _, step := range steps {
			if strings.HasPrefix(step, "create ") && (strings.HasSuffix(step, "-secrets") || strings.HasSuffix(step, "-bootstrap")) {
				t.Errorf("the preview after adoption plans %q: %v", step, steps)
			}
		}
		// w-1 does not answer while the up's preview decides its mode, and
		// is back by the time the update applies it (once cp-1's apply
		// went out). Its first config (no apply in state) on a VM already
		// in state, which may run a config, is never decided auto
		// (internal/applymode): auto there reboots a configured node whose
		// running config differs in a field that needs a reboot (machined:
		// AUTO becomes REBOOT when CanApplyImmediate refuses).
		boot := w1.Status().BootID
		if err := w1.SetReachable(false); err != nil {
			t.Fatal(err)
		}
		back := s.reachableAgain(w1, func(e talosapi.Entry) bool {
			return e.Node == "cp-1" && e.Name() == "ApplyConfiguration" && !e.DryRun()
		})
		up := s.milner("up", "--yes")
		back()
		if !strings.Contains(up.stdout, "w-1: applies live (no_reboot") {
			t.Errorf("up: want w-1, unreachable at its preview, decided no_reboot:\n%s", up.out())
		}
		// Talos refuses the no_reboot (InvalidArgument, which the provider
		// does not retry), so the up stops naming w-1; nothing rebooted.
		refused(t, "up with w-1 back at apply", up, "w-1-apply", "can't be applied in immediate mode")
		if e := s.c.Journal()[mark:].Events("reboot"); len(e) > 0 || w1.Status().BootID != boot {
			t.Fatalf("the recovery rebooted a node (w-1 boot %s, was %s):\n%s", w1.Status().BootID, boot, strings.Join(e.Strings(), "\n"))
		}
		// The next up, w-1 answering, stages its change.
		decoded(t, "up", s.mustMilner("up", "--yes", "--json"), &recovered)
		if !recovered.Applied || len(digestSteps(t, "up", recovered)) == 0 {
			t.Errorf("up --json of the recovery: want applied, with the digest of its plan: %+v", recovered)
		}
		j := s.c.Journal()[mark:]
		t.Logf("journal of the recovery (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		if b := j.Calls("Bootstrap"); len(b) > 0 {
			t.Errorf("the recovery bootstrapped again:\n%s", strings.Join(b.Strings(), "\n"))
		}
		if e := j.Events("reboot"); len(e) > 0 || w1.Status().BootID != boot {
			t.Errorf("the recovery rebooted a node (w-1 boot %s, was %s):\n%s", w1.Status().BootID, boot, strings.Join(e.Strings(), "\n"))
		}
		var w1Modes []string
		for _, a := range j.Applies() {
			switch {
			case a.Node == "w-1":
				w1Modes = append(w1Modes, a.Mode().String()+map[bool]string{true: " refused", false: ""}[a.Err != nil])
			case a.Mode() != machine.ApplyConfigurationRequest_NO_REBOOT || a.Err != nil:
				t.Errorf("the recovery's apply to %s: want NO_REBOOT, got %s", a.Node, a)
			}
		}
		if !slices.Equal(w1Modes, []string{"NO_REBOOT refused", "STAGED"}) {
			t.Errorf("w-1's applies: %v, want NO_REBOOT refused, then STAGED", w1Modes)
		}
		if !strings.Contains(string(w1.Config()), "GODEBUG") || !w1.Status().Pending {
			t.Errorf("w-1: want its running config kept and the stack's staged for its next reboot")
		}
		for typ, want := range before {
			if got := s.stateIDs(typ); !maps.Equal(got, want) {
				t.Errorf("%s in state after recovery: %v, before the loss %v", typ, got, want)
			}
		}
		// An adopted cluster declares no bootstrap (stacks/talos.go: the
		// plugin cannot import one).
		if got := s.stateIDs(gate.TypeTalosBootstrap); len(got) != 0 {
			t.Errorf("state holds bootstraps %v, want none", got)
		}
		if p := s.mustMilner("preview"); !strings.Contains(p.stdout, "no changes") {
			t.Errorf("preview after the recovery: want no changes:\n%s", p.out())
		}
		s.hasNoChanges("up after the recovery", s.mustMilner("up", "--yes"))
	})

	step("an OIDC group binding removed from config is removed from the cluster", func(t *testing.T, _ int) {
		// The apps layer on the cluster's API server (on the VIP), as the
		// recovered stack file declares it: the OIDC bindings and the
		// workloads' objects, no storage and no app, no wait for pods.
		oidc := func(bindings map[string]string) map[string]any {
			return map[string]any{"issuerUrl": "https://sso.example.org/realms/site", "clientId": "kubernetes",
				"usernameClaim": "preferred_username", "groupsClaim": "groups", "groupBindings": bindings}
		}
		s.editConfig(func(cfg map[string]any) {
			cfg["milner:stopAfter"], cfg["milner:waitForApps"] = "apps", false
			cfg["milner:storage"] = map[string]any{"enabled": false}
			cfg["milner:cluster"].(map[string]any)["oidc"] = oidc(map[string]string{"platform-admins": "cluster-admin", "viewers": "view"})
		})
		restarted := len(s.clusterAPI().Restarts())
		up := s.mustMilner("up", "--yes")
		api := s.clusterAPI()
		// The OIDC flags restart cp-1's API server at the kubelet's next
		// poll after its apply; the apps' requests wait for it (cp-1 is the
		// last control plane: no next one waits), or the restart cuts them.
		if !strings.Contains(up.out(), "milner: cp-1's API server runs config version") {
			t.Errorf("the up did not wait for cp-1's API server before the apps:\n%s", up.out())
		}
		if restarts := api.Restarts()[restarted:]; !slices.ContainsFunc(restarts, func(r clusterapi.Restart) bool { return r.Node == "cp-1" }) {
			t.Errorf("cp-1's API server did not restart for the OIDC flags: %v", restarts)
		}
		binding := func(group string) (map[string]any, int) {
			t.Helper()
			b, code, err := api.Do(http.MethodGet, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/"+config.OIDCBindingName(group), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			obj := map[string]any{}
			_ = json.Unmarshal(b, &obj)
			return obj, code
		}
		for group, role := range map[string]string{"platform-admins": "cluster-admin", "viewers": "view"} {
			crb, code := binding(group)
			subjects, _ := crb["subjects"].([]any)
			ref, _ := crb["roleRef"].(map[string]any)
			if code != http.StatusOK || len(subjects) != 1 || subjects[0].(map[string]any)["name"] != "oidc:"+group || ref["name"] != role {
				t.Fatalf("binding of %s: %d %v", group, code, crb)
			}
		}
		admins, _ := binding("platform-admins")

		s.editConfig(func(cfg map[string]any) {
			cfg["milner:cluster"].(map[string]any)["oidc"] = oidc(map[string]string{"platform-admins": "cluster-admin"})
		})
		s.mustMilner("up", "--yes")
		if _, code := binding("viewers"); code != http.StatusNotFound {
			t.Errorf("the removed binding: GET answers %d, want 404", code)
		}
		kept, _ := binding("platform-admins")
		if uid := func(o map[string]any) any { return o["metadata"].(map[string]any)["uid"] }; uid(kept) != uid(admins) {
			t.Errorf("the kept binding was recreated: uid %v, was %v", uid(kept), uid(admins))
		}
	})

	j := s.c.Journal()
	for _, m := range []string{"Reset", "Reboot"} {
		if calls := j.Calls(m); len(calls) > 0 {
			t.Errorf("%s was sent:\n%s", m, strings.Join(calls.Strings(), "\n"))
		}
	}
}

// step runs one step of the scenario as a subtest of t, unless an earlier
// one failed, with the journal's length before it; it logs its result and
// wall time.
func (s *talosLayer) step(t *testing.T, name string, f func(t *testing.T, mark int)) {
	if t.Failed() {
		return
	}
	mark := len(s.c.Journal())
	start := time.Now()
	ok := t.Run(name, func(t *testing.T) { s.t = t; f(t, mark) })
	s.t = t
	t.Logf("%s: %s in %s", name, map[bool]string{true: "PASS", false: "FAIL"}[ok], time.Since(start).Round(time.Second))
}

// tnode is one node of a Talos-layer scenario: its name, its address's
// last byte on the scenario's subnet (its MAC's last byte is the same
// digits read as hex, as the harness's nodes have), and its role.
type tnode struct {
	name         string
	host         byte
	controlPlane bool
}

// mac is the node's MAC in the scenario's stack file and its double's
// (the config's deviceSelector must match it: talosapi.WithMAC).
func (n tnode) mac(s *scenario) string {
	b, err := strconv.ParseUint(strconv.Itoa(int(n.host)), 16, 8)
	if err != nil {
		panic(err) // host is at most 99
	}
	return s.mac(int(b))
}

// addr is the node's address on subnet.
func (n tnode) addr(subnet int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 199, byte(subnet), n.host})
}

// newTalosLayer prepares a scenario of the given nodes (the first a
// control plane): the doubles (registered first, so they outlive the
// teardown that shuts the nodes down), the scenario's libvirt project with
// the Talos layer declared (the caller writes its stack file with apply),
// and, as soon as the first control plane holds its config, the cluster
// API, seeded with every node, each control plane's own API server
// address (clusterapi.API.Relay), the VIP answering through the control
// plane elected to hold it (clusterapi.API.RelayVIP; the doubles carry
// their nodes' MACs, so the config's deviceSelector decides the static
// address and the VIP) and a kubelet per node (clusterapi.API.Kubelet).
func newTalosLayer(t *testing.T, id string, subnet int, nodes []tnode, opts ...layerOption) *talosLayer {
	t.Helper()
	var o layerOptions
	for _, opt := range opts {
		opt(&o)
	}
	s := &talosLayer{api: make(chan *clusterapi.API, 1), bootDelay: o.bootDelay}
	kubelet := kubeletTiming()
	if o.kubelet != nil {
		kubelet = *o.kubelet
	}
	cluster := "milner-it-" + id
	vip := netip.AddrFrom4([4]byte{10, 199, byte(subnet), 240})
	// The first kubeconfig's client certificate expires within the
	// provider's renewal window (720h): the renewal step renews it.
	s.c = talosapi.NewCluster(append([]talosapi.Option{talosapi.WithKubeconfigTTL(100 * time.Hour), talosapi.WithLearnerPromotion(learnerPromotion()), talosapi.WithRebootDowntime(rebootDowntime()), talosapi.WithVIPLeaseTTL(vipLeaseTTL()), talosapi.OnShutdown(func(n *talosapi.Node) {
		// Talos powers the machine off at the end of its shutdown.
		_ = exec.Command("virsh", "-c", uri, "destroy", cluster+"-"+n.Name()).Run()
	})}, o.cluster...)...)
	t.Cleanup(func() { _ = s.c.Close() })
	apiDir := t.TempDir()
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		select {
		case a := <-s.api:
			if a != nil {
				if t.Failed() {
					t.Logf("kube-apiserver log:\n%s", a.Logs("kube-apiserver"))
				}
				a.Stop()
			}
		default:
		}
	})
	go func() {
		var cp *talosapi.Node // added below, with newMilnerScenario's addresses
		for cp = s.c.Node(nodes[0].name); cp == nil || cp.Config() == nil; cp = s.c.Node(nodes[0].name) {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		a, err := clusterapi.Start(filepath.Join(repo, ".tools", "bin"), apiDir, vip, cp.Config())
		if err == nil {
			// A control plane's EtcdSnapshot streams the cluster's etcd,
			// and its recover restores it: the test API server's own,
			// real one.
			s.c.SetEtcdSnapshotSource(a.EtcdSnapshot)
			s.c.SetEtcdRecoverSink(a.RestoreEtcd)
			var seed []clusterapi.Node
			for _, n := range nodes {
				seed = append(seed, clusterapi.Node{Name: n.name, IP: n.addr(subnet), ControlPlane: n.controlPlane})
			}
			err = a.Seed(seed)
		}
		for _, n := range nodes {
			if err == nil && n.controlPlane {
				err = a.Relay(s.c.Node(n.name))
			}
		}
		if err == nil {
			err = a.RelayVIP(s.c) // the VIP answers through its elected holder
		}
		if err == nil {
			go a.Kubelet(s.c, done, kubelet)
			// Each node's Shutdown and Upgrade drain through the API
			// server, as Talos' drain does through the kubelet's kubeconfig.
			var cs kubernetes.Interface
			if cs, err = a.Clientset(); err == nil {
				s.c.SetKubernetes(cs, drainTiming())
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "cluster API: %v\n", err)
		}
		s.api <- a
	}()
	s.milnerScenario = newMilnerScenario(t, id, subnet)
	s.stopAfter = "talos"
	s.nodes = nil
	for _, n := range nodes {
		s.addNode(n)
	}
	if s.bootDelay > 0 {
		s.bootWithDomains(done)
	}
	return s
}

// layerOption configures newTalosLayer.
type layerOption func(*layerOptions)

type layerOptions struct {
	cluster   []talosapi.Option
	bootDelay time.Duration
	kubelet   *clusterapi.KubeletTiming
}

// withKubelet times the played kubelet (else kubeletTiming()).
func withKubelet(t clusterapi.KubeletTiming) layerOption {
	return func(o *layerOptions) { o.kubelet = &t }
}

// withCluster adds options to the scenario's talosapi.Cluster.
func withCluster(opts ...talosapi.Option) layerOption {
	return func(o *layerOptions) { o.cluster = append(o.cluster, opts...) }
}

// vmsNotYetBooted makes each of the scenario's first nodes a VM that does
// not exist yet: its double is off until its libvirt domain runs (the
// up's create starts it), and answers, in maintenance mode, only delay
// after that, as Talos booting from its image does (bootDelay). Without
// it the doubles are on before the first up, as if the VMs had booted.
func vmsNotYetBooted(delay time.Duration) layerOption {
	return func(o *layerOptions) { o.bootDelay = delay }
}

// bootWithDomains powers each double on s.bootDelay after its domain was
// first seen running (one `virsh list` every 250 ms until every node is
// on, or done), recording when (domainStarted).
func (s *talosLayer) bootWithDomains(done <-chan struct{}) {
	s.domainStarted = map[string]time.Time{}
	pending := map[string]*talosapi.Node{}
	for _, n := range s.c.Nodes() {
		pending[s.domain(n.Name())] = n
	}
	go func() {
		for len(pending) > 0 {
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
			out, err := exec.Command("virsh", "-c", uri, "list", "--state-running", "--name").Output()
			if err != nil {
				continue
			}
			for _, dom := range strings.Fields(string(out)) {
				n, ok := pending[dom]
				if !ok {
					continue
				}
				delete(pending, dom)
				s.startedMu.Lock()
				s.domainStarted[n.Name()] = time.Now()
				s.startedMu.Unlock()
				time.AfterFunc(s.bootDelay, func() {
					if err := n.PowerOn(); err != nil {
						fmt.Fprintf(os.Stderr, "power on %s: %v\n", n.Name(), err)
					}
				})
			}
		}
	}()
}

// started is when the node's domain was first seen running (zero: not
// yet, or the scenario's VMs were booted before it began).
func (s *talosLayer) started(node string) time.Time {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	return s.domainStarted[node]
}

// addNode adds a node to the scenario: its Talos API double, on at once
// (in maintenance mode, as a VM booted from the image is), and its entry
// in milner:nodes (written by the next apply).
func (s *talosLayer) addNode(n tnode) *talosapi.Node {
	s.t.Helper()
	opts := []talosapi.NodeOption{
		talosapi.WithDisks(talosapi.Disk{DevPath: "/dev/vda", Size: 10 << 30}, talosapi.Disk{DevPath: "/dev/vdb", Size: 1 << 30}),
		talosapi.WithPlatform(talosapi.Metal), talosapi.WithVersion(talosFrom), talosapi.WithMAC(n.mac(s.scenario)),
	}
	if s.bootDelay > 0 && s.domainStarted == nil {
		opts = append(opts, talosapi.WithPoweredOff()) // bootWithDomains powers it on
	}
	d, err := s.c.AddNode(n.name, netip.AddrPortFrom(n.addr(s.subnet), 50000), opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	hn := node{Name: n.name, Role: "worker", VCPU: 1, Memory: 1024, OSDisk: 10, Data: 1, Address: n.addr(s.subnet).String(), MAC: n.mac(s.scenario)}
	if n.controlPlane {
		hn.Role, hn.Memory = "controlplane", 2048
	}
	s.nodes = append(s.nodes, hn)
	return d
}

// clusterAPI is the cluster's API server, once started.
func (s *talosLayer) clusterAPI() *clusterapi.API {
	s.t.Helper()
	select {
	case a := <-s.api:
		s.api <- a
		if a == nil {
			s.t.Fatal("the cluster API did not start (see the log)")
		}
		return a
	case <-time.After(time.Minute):
		s.t.Fatal("the cluster API did not start within a minute of the up")
		return nil
	}
}

// workloads is a milner:workloads with the given dedicated nodes.
func workloads(dedicated ...string) map[string]any {
	w := map[string]any{"namespace": "npcs", "quota": map[string]string{"requests.cpu": "1", "requests.memory": "1Gi"}}
	if len(dedicated) > 0 {
		w["dedicatedNodes"] = dedicated
	}
	return w
}

// secretOutputsOnlyInEnvelopes checks that the stack's kubeconfig and
// talosconfig outputs are secret envelopes in the checkpoint and that no
// object of the backend holds their client keys, or any private key,
// outside one.
func (s *talosLayer) secretOutputsOnlyInEnvelopes(ctx context.Context) {
	t := s.t
	t.Helper()
	outs, err := s.stack.Outputs(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	leaks := []string{"PRIVATE KEY"}
	for key, re := range map[string]*regexp.Regexp{
		"kubeconfig":  regexp.MustCompile(`client-key-data:\s*(\S+)`),
		"talosconfig": regexp.MustCompile(`\bkey:\s*(\S+)`),
	} {
		text, _ := outs[key].(string)
		m := re.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("output %s: no client key in it", key)
			continue
		}
		leaks = append(leaks, m[1])
	}
	for _, r := range s.exported().Resources {
		if r.Type != resource.RootStackType {
			continue
		}
		for _, key := range []string{"kubeconfig", "talosconfig"} {
			env, _ := r.Outputs[key].(map[string]any)
			if env["4dabf18193072939515e22adb298388d"] != "1b47061264138c4ac30d75fd1eb44270" {
				t.Errorf("output %s is not a secret envelope in the checkpoint", key)
			}
		}
	}
	scanBackend(t, fileObjects(t, filepath.Join(s.dir, "state")), leaks)
}

// operatorClient is a Talos client of n over mutual TLS with the stack's
// talosconfig, as an operator's talosctl is; closed at the test's end.
func (s *talosLayer) operatorClient(ctx context.Context, n *talosapi.Node) *client.Client {
	t := s.t
	t.Helper()
	outs, err := s.stack.Outputs(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := outs["talosconfig"].(string)
	tc, err := clientconfig.FromString(text)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(n.Endpoint()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// operatorApply applies the node's running config with patch to it in
// REBOOT mode over mutual TLS with the stack's talosconfig, as an operator
// with talosctl would, and waits for the node to answer again.
func (s *talosLayer) operatorApply(ctx context.Context, n *talosapi.Node, patch string) {
	t := s.t
	t.Helper()
	ps, err := configpatcher.LoadPatches([]string{patch})
	if err != nil {
		t.Fatal(err)
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes(n.Config()), ps)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	c := s.operatorClient(ctx, n)
	if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_REBOOT}); err != nil {
		t.Fatalf("operator's apply to %s: %v", n.Name(), err)
	}
	deadline := time.Now().Add(time.Minute)
	for !n.Status().Booted || !strings.Contains(string(n.Config()), "GODEBUG") {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come back with the operator's config: %+v", n.Name(), n.Status())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// bootWhenReplaced powers the node's double on once its domain runs with
// another uuid than was (the replace's new VM, booted by the engine's
// create), as the VM's firmware boots Talos: from the kept OS disk, or,
// fresh, from a new one that holds no config (maintenance mode). The
// returned func waits up to 30 s for that power-on (an up that applies
// nothing ends as soon as the engine started the domain), then stops the
// watch.
func (s *talosLayer) bootWhenReplaced(n *talosapi.Node, was string, fresh bool) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	dom := s.domain(n.Name())
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			uuid, err := exec.Command("virsh", "-c", uri, "domuuid", dom).Output()
			if err != nil || strings.TrimSpace(string(uuid)) == was {
				continue
			}
			state, err := exec.Command("virsh", "-c", uri, "domstate", dom).Output()
			if err == nil && strings.TrimSpace(string(state)) == "running" {
				if fresh {
					err = n.Wipe()
				}
				if err == nil {
					err = n.PowerOn()
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "power on %s: %v\n", n.Name(), err)
				}
				return
			}
		}
	}()
	return func() {
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			close(done)
			<-exited
		}
	}
}

// reachableAgain restores n's network (SetReachable) as soon as the
// journal holds an entry, after its length now, that when matches, or
// when the returned func is called, which waits for it.
func (s *talosLayer) reachableAgain(n *talosapi.Node, when func(talosapi.Entry) bool) (wait func()) {
	from := len(s.c.Journal())
	stop, restored := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(restored)
		for !slices.ContainsFunc(s.c.Journal()[from:], when) {
			select {
			case <-stop:
				_ = n.SetReachable(true)
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err := n.SetReachable(true); err != nil {
			fmt.Fprintf(os.Stderr, "%s reachable again: %v\n", n.Name(), err)
		}
	}()
	return func() {
		close(stop)
		<-restored
	}
}

// editConfig edits the stack file's config in place (keeping what milner
// wrote to it, such as an adoption's records).
func (s *talosLayer) editConfig(edit func(cfg map[string]any)) {
	s.t.Helper()
	b, err := os.ReadFile(s.stackFile())
	if err != nil {
		s.t.Fatal(err)
	}
	doc := map[string]any{}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		s.t.Fatal(err)
	}
	edit(doc["config"].(map[string]any))
	if b, err = yaml.Marshal(doc); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(s.stackFile(), b, 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// kubeconfigCertificate is the client certificate of the stack's
// kubeconfig output.
func (s *talosLayer) kubeconfigCertificate(ctx context.Context) *x509.Certificate {
	t := s.t
	t.Helper()
	outs, err := s.stack.Outputs(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := outs["kubeconfig"].(string)
	m := regexp.MustCompile(`client-certificate-data:\s*(\S+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("the kubeconfig output holds no client certificate")
	}
	der, err := base64.StdEncoding.DecodeString(m[1])
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(der)
	if block == nil {
		t.Fatal("the kubeconfig's client certificate is not PEM")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubeletTiming is the played kubelet's: clusterapi.CIKubelet, or with
// MILNER_DOUBLE_TIMING=real the kubelet's own (clusterapi.RealKubelet),
// run by hand.
func kubeletTiming() clusterapi.KubeletTiming {
	if realTiming() {
		return clusterapi.RealKubelet
	}
	return clusterapi.CIKubelet
}

// drainTiming is the doubles' drain: talosapi.CIDrain, or with
// MILNER_DOUBLE_TIMING=real Talos' own (talosapi.RealDrain).
func drainTiming() talosapi.DrainTiming {
	if realTiming() {
		return talosapi.RealDrain
	}
	return talosapi.CIDrain
}

// realTiming is MILNER_DOUBLE_TIMING=real: the doubles take Talos' and the
// machine's own durations (run by hand), not CI's scaled ones.
func realTiming() bool { return os.Getenv("MILNER_DOUBLE_TIMING") == "real" }

// scaled is the real duration under realTiming, else CI's.
func scaled(real, ci time.Duration) time.Duration {
	if realTiming() {
		return real
	}
	return ci
}

// rebootDowntime is how long a rebooting node does not answer. Talos
// leaves it to the machine: its reboot sequence stops the services and
// unmounts (v1.13.9 internal/app/machined/pkg/runtime/v1alpha1/
// v1alpha1_sequencer.go Reboot), then the firmware or kexec and the boot
// up to apid take what the hardware takes. The real profile's 60 s is a
// round figure for a VM, not measured (no Talos image runs here); CI's is
// a tenth of it, as kubeletTiming and learnerPromotion are scaled.
func rebootDowntime() time.Duration { return scaled(60*time.Second, 6*time.Second) }

// vipLeaseTTL is how long the VIP stays unheld after its holder vanished
// without resigning (a power cut): its etcd session's lease, 60 s
// (concurrency.NewSession's default TTL, which talos v1.13.9
// controllers/network/operator/vip.go campaign keeps; internal/pkg/etcd/
// session.go names the 60 s); CI's is a tenth, as the other timings are
// scaled. A graceful reboot or shutdown resigns and hands it over at once.
func vipLeaseTTL() time.Duration { return scaled(60*time.Second, 6*time.Second) }

// learnerPromotion is how long a joining control plane stays an etcd
// learner: Talos' etcd service asks for its promotion every 15 s
// (v1.13.9 internal/app/machined/pkg/system/services/etcd.go
// promoteMember), the first ask before the learner has caught up; scaled
// tenfold for CI as kubeletTiming is, the real 15 s with
// MILNER_DOUBLE_TIMING=real.
func learnerPromotion() time.Duration { return scaled(15*time.Second, 1500*time.Millisecond) }

// vmBoot is how long a VM that was just started takes until Talos answers
// in maintenance mode. Talos leaves it to the machine: the firmware, the
// kernel and initramfs from the ISO, then machined's boot sequence up to
// the maintenance service (v1.13.9 internal/app/machined/pkg/runtime/
// v1alpha1/v1alpha1_sequencer.go Initialize, Boot). The real profile's
// 30 s is a round figure for a VM (no Talos image runs here to measure
// it; siderolabs/talos#3005's serial log shows 13 s from its disks'
// mount to apid running, after the firmware and kernel); CI's is a tenth
// of it, as the other timings are scaled.
func vmBoot() time.Duration { return scaled(30*time.Second, 3*time.Second) }

// timeSync is how long after a boot a node's time is in sync: Talos marks
// it synced at its NTP source's first valid answer, asking again every
// second until one comes (v1.13.9 internal/pkg/ntp/ntp.go Run, RetryPoll;
// controllers/time/sync.go), so it takes what the site's time source
// takes; Bootstrap waits 5 s for it, then answers FailedPrecondition
// "time is not in sync yet" (siderolabs/talos#6493 met it right after
// an apply). CI's 8 s puts it past that wait, so the provider's Bootstrap
// meets the refusal and retries; the real profile's 30 s is a slow time
// source, not a measurement.
func timeSync() time.Duration { return scaled(30*time.Second, 8*time.Second) }
