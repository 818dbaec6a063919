//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/milner/milner/internal/etcdbackup"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/tests/clusterapi"
	"github.com/milner/milner/tests/harness"
	"github.com/milner/milner/tests/talosapi"
)

// The control planes' scenario: its id (cluster milner-it-tcps) and subnet.
const (
	tcpsID     = "tcps"
	tcpsSubnet = 48
)

// TestTalosControlPlanesOnRealPlugin: what only a cluster of several
// control planes shows, through the real Talos plugin on the real engine,
// driven by `milner`, with the libvirt substrate real and each node's
// Talos API a tests/talosapi double on its own address (the harness of
// TestTalosLayerOnRealPlugin). Three control planes and a worker (whose
// kubelet the Kubernetes upgrade moves too), in order:
//
//  1. from empty, with no VM booted: each double is off until the up's
//     create starts its domain and answers vmBoot after that, and its
//     time is in sync timeSync after each boot (tests/talosapi
//     WithTimeSync). The preview asks no node (from empty it cannot
//     decide a mode: the configs need the secrets the up creates); the up
//     decides each mode (auto) as the domains are made, the provider
//     dials each node before it answers and retries until it does, and
//     Bootstrap is answered "time is not in sync yet" before one
//     succeeds. Then: each first config in maintenance mode, the control
//     planes' applies one at a time (each sent after the previous one was
//     answered), one Bootstrap on one control plane, no API server asked
//     before it (none runs before the bootstrap: internal/apiready waits
//     between updates), the health check passing with no call answered
//     Unimplemented or PermissionDenied (which make a check skip);
//  2. the kubeconfig's renewal with cp-1, the node it was asked of,
//     unreachable: the renewal asks cp-2, and runs no health check;
//  3. a live .cluster change on every control plane (the OIDC flags): the
//     applies one at a time, and between them the previous control
//     plane's own API server asked for /readyz at its address;
//  4. `milner up --replace cp-2`: Shutdown to cp-2 alone, only its domain
//     new, no config sent, etcd's members kept, the kubeconfig moved off
//     the replaced node without a call; with a ReplicaSet's pod on cp-2
//     that takes its preStop sleep to stop (20 s, 2 s in CI), Talos'
//     Shutdown drains it first: evicted, gone and its replacement Ready on
//     another node before the power-off, the VM deleted only after, no
//     other pod recreated, cp-2 schedulable again once back;
//  5. `milner up --replace cp-2 --os-disk`: cp-2's etcd member removed,
//     its fresh OS disk's first config taken in maintenance mode, rejoined
//     as a new member; the other control planes untouched;
//  6. a Kubernetes bump (v1.32.3 -> v1.32.4) refused by preview and up,
//     then `milner upgrade`: upstream's upgrade-k8s end to end against the
//     doubles and the cluster's API server, nothing replaced, a no-op after;
//  7. a worker added to the running cluster: the preview creates its
//     resources alone, the up sends its first config alone (maintenance
//     mode), nothing else changed, a no-op after;
//  8. a fourth control plane: adding it with another node in one run is
//     refused (one-new-node); alone, the preview warns of the even etcd
//     membership and creates its resources alone (no other config
//     changes); it takes its first config, joins etcd as a learner with no
//     Bootstrap, the up ends once it votes, a no-op after; then a fifth
//     the same way, with no warning;
//  9. `milner etcd snapshot` of the running cluster (the API server's real
//     etcd through a control plane), `milner etcd inspect` of the file;
//  10. etcd lost on every control plane: `milner etcd restore` refused
//     while etcd had quorum (exit 5, nothing sent); etcd failed on every
//     control plane and the API server's etcd data deleted; each control
//     plane's EPHEMERAL wiped as the operator's talosctl does (the
//     runbook's first step); the restore uploads to cp-1 and bootstraps
//     it from the snapshot alone (the API server's etcd restored from the
//     uploaded bytes by etcdutl, as Talos' etcd service does), the other
//     control planes rejoin one learner at a time, an object written after
//     the snapshot is gone and one written before it is back, `status`
//     and a no-op `up` (Talos' health check) pass;
//  11. a worker removed (`up --remove w-2`): refused without the flag; a
//     pod a PodDisruptionBudget keeps stops the drain, the refusal naming
//     the pod, nothing else touched; without the budget it is drained,
//     shut down (never Reset), its VM deleted, its volumes kept on the
//     host and out of state, its Kubernetes node gone, a no-op after;
//  12. control planes removed one per run (cp-5, then cp-4): drain, its
//     etcd member removed through another control plane, Shutdown, its VM
//     deleted, in that order, the other members kept, a no-op after;
//  13. a removal refused when it would lose quorum (cp-3's etcd down);
//  14. kept volumes: the teardown refused while the pool holds them,
//     naming each; cp-4's and cp-5's deleted with the printed commands; w-2 declared
//     again: refused, naming its volumes; `adopt --all` and `up` bring it
//     back on them (the same files), booted from its own disk with its
//     config, its apply alone and no reboot, a no-op after;
//  15. `milner teardown`.
//
// Milner sends no node Reset or Reboot (the only resets are the
// operator's, in step 10).
//
// What each step showed failing, with its fix reverted, and the times
// (about 3 minutes in all): in step 2, with the kubeconfig's node taken
// from the bootstrap, as before, the renewal dials cp-1 until the
// provider's 10-minute timeout and the up fails; with its update counted
// as a Talos change, the health check waits on cp-1 for its own 10
// minutes. In step 3 the played kubelet polls Talos' static pods every 2 s
// (its 20 s default scaled tenfold; MILNER_DOUBLE_TIMING=real for 20 s)
// and restarts the API server for 1 s, dropping its connections: each
// control plane's restart ended before the next one's apply was sent. In
// step 4, with the replaced node not avoided, the kubeconfig stays on
// cp-2; with milner's Shutdown forced (no drain) the web pod is never
// evicted and the step fails at once ("want one Shutdown, one drain, one
// power-off; got Shutdown 1, drain 0"); with the drain, Shutdown to the
// power-off took 2.5 s (the pod's 2 s preStop), the VM deleted 4 s later
// (the VM stop poll), the replacement Ready on w-1 0.7 s after the
// eviction. In step 6, with ImagePull unanswered upgrade-k8s logs "not
// implemented, skipping" and the test fails. In step 8 the double
// promotes a joining control plane after 1.5 s (Talos' 15 s scaled
// tenfold, one learner at a time). Step 9 read revision 356, 215 keys, in
// 1 s; step 10 took 37 s, the restore's upload and cp-1's bootstrap 5.9 s. In step 11 the drain kept by the budget exits 1
// in 10 s (`--drain-timeout 8s`); the removal took 15 s. In step 12 cp-4's
// removal took 13.8 s, the VM's stop the longest wait (5 s: the verb's
// poll). The played cluster deletes evicted pods on running nodes (the
// kubelet's final delete), pods on deleted Nodes after podgc's quarantine
// (40 s, 4 s in CI), and keeps kube-proxy's DaemonSet counts at the Node
// count.
//
// Step 6 (v1.32.3 → v1.32.4, 46 s for the verb): upstream's upgrade-k8s asks what it asks of Talos, and the double
// answers as Talos v1.9.5 does: `Version` for the compatibility check,
// `ImagePull` (v1alpha1_images.go), the running config as
// `config.MachineConfig` (v1alpha2_state.go `SetConfig`), the control plane
// components' config resources watched for their new version
// (controllers/k8s/control_plane.go), the static pods written with that
// version as `talos.dev/config-version` (control_plane_static_pod.go), the
// kubelet's `Service` destroyed and created again when its image changes
// (controllers/v1alpha1/service.go), `ApplyConfiguration` `NO_REBOOT` for
// each patch. What a kubelet does, the test does: it mirrors each static pod
// into the API server (annotations, image, `hostIP`, Ready) and reports each
// Node's kubelet version from its running config. One step runs on nothing:
// the bootstrap manifests' sync lists the control plane's `k8s.Manifest`
// resources and the double serves none, so no manifest (CoreDNS, the
// kube-proxy DaemonSet, ...) is applied or waited for. Talos renders them
// from templates in its `internal/` packages (controllers/k8s/manifest.go),
// which no other module can import, and the double does not write them by
// hand. The kube-proxy image reaches each control plane's config (upgrade-k8s
// patches it); its DaemonSet in the API server stays as seeded. After the
// upgrade, the record updates the four applies (live: those recorded `auto`,
// a first config's mode, are sent `AUTO` again because the node runs that
// very config, and Talos applies an unchanged config live) and a second
// `up` plans nothing.
func TestTalosControlPlanesOnRealPlugin(t *testing.T) {
	requireTalosTools(t)
	nodes := []tnode{{"cp-1", 11, true}, {"cp-2", 12, true}, {"cp-3", 13, true}, {"w-1", 21, false}}
	// w-2, cp-4 and cp-5 join the running cluster in steps 7 and 8.
	w2, cp4, cp5 := tnode{"w-2", 22, false}, tnode{"cp-4", 14, true}, tnode{"cp-5", 15, true}
	addrs := []netip.Addr{netip.AddrFrom4([4]byte{10, 199, tcpsSubnet, 240})}
	for _, n := range append(slices.Clone(nodes), w2, cp4, cp5) {
		addrs = append(addrs, n.addr(tcpsSubnet))
	}
	if os.Getenv(talosNetnsEnv) == "" {
		harness.Milner(t, repo) // built outside, where the module cache is reachable
	}
	if !inTalosNamespace(t, addrs...) {
		return
	}
	s := newTalosLayer(t, tcpsID, tcpsSubnet, nodes, vmsNotYetBooted(vmBoot()), withCluster(talosapi.WithTimeSync(timeSync())))
	s.apply()
	ctx := context.Background()
	cp1, cp2, w1 := s.c.Node("cp-1"), s.c.Node("cp-2"), s.c.Node("w-1")
	cps := []*talosapi.Node{cp1, cp2, s.c.Node("cp-3")}
	step := func(name string, f func(t *testing.T, mark int)) { s.step(t, name, f) }

	step("from empty", func(t *testing.T, mark int) {
		// No VM exists yet, and no node answers. From empty the preview
		// cannot decide a mode (the configs need the secrets the up
		// creates): it says so, and asks no node anything.
		p := s.mustMilner("preview")
		for _, n := range append(slices.Clone(cps), w1) {
			if !strings.Contains(p.stdout, n.Name()+": decided when applied") {
				t.Errorf("preview: want %s's mode decided when applied:\n%s", n.Name(), p.out())
			}
			if n.Status().On {
				t.Errorf("%s is on before its VM exists", n.Name())
			}
		}
		if j := s.c.Journal()[mark:]; len(j) > 0 {
			t.Errorf("a node answered before its VM existed:\n%s", strings.Join(j.Strings(), "\n"))
		}
		start := time.Now()
		s.mustMilner("up", "--yes")
		t.Logf("up from empty, the VMs booting %s after their domains start, time in sync %s after each boot: %s", vmBoot(), timeSync(), time.Since(start).Round(time.Second))
		j := s.c.Journal()[mark:]
		t.Logf("journal of the bring-up (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		// The up decided each mode (auto: a first config on a VM new in
		// this run, internal/applymode) as the domains were made, and the
		// provider first dialled each node before its VM answered: the
		// first config reached it only after the boot, through the
		// provider's retries (its Create retries every error but
		// InvalidArgument: terraform-provider-talos v0.10.1
		// talos_machine_configuration_apply_resource.go).
		for _, n := range append(slices.Clone(cps), w1) {
			started, boots, applies := s.started(n.Name()), j.On(n.Name()).Events("boot"), j.On(n.Name()).Applies()
			if started.IsZero() || len(boots) == 0 || len(applies) == 0 {
				t.Errorf("%s: domain started %v, boots %d, applies %d", n.Name(), started, len(boots), len(applies))
				continue
			}
			t.Logf("%s: domain running %s after the up began, answering %s later, first config %s after that", n.Name(), started.Sub(start).Round(10*time.Millisecond),
				boots[0].Time.Sub(started).Round(10*time.Millisecond), applies[0].Time.Sub(boots[0].Time).Round(10*time.Millisecond))
			if boots[0].Time.Sub(started) < vmBoot() || !applies[0].Time.After(boots[0].Time) || boots[0].Time.Before(start) {
				t.Errorf("%s: domain started %s, booted %s, first config %s: want the boot %s after the start, within the up, and the config after it", n.Name(),
					started.Format(time.StampMilli), boots[0].Time.Format(time.StampMilli), applies[0].Time.Format(time.StampMilli), vmBoot())
			}
		}
		// Bootstrap met the clock not yet in sync, and the provider's
		// retries (talos_machine_bootstrap_resource.go Create) got past it.
		var unsynced int
		for _, b := range j.Calls("Bootstrap") {
			t.Logf("Bootstrap to %s at %s, answered %s: %v", b.Node, b.Time.Format(time.StampMilli), b.Done.Sub(b.Time).Round(10*time.Millisecond), b.Err)
			if b.Err == nil {
				break
			}
			if status.Code(b.Err) == codes.FailedPrecondition && strings.Contains(b.Err.Error(), "time is not in sync yet") {
				unsynced++
			}
		}
		if unsynced == 0 {
			t.Errorf("no Bootstrap was answered \"time is not in sync yet\" before the one that succeeded:\n%s", strings.Join(j.Calls("Bootstrap").Strings(), "\n"))
		}
		counts := map[string]int{}
		for _, r := range s.exported().Resources {
			counts[string(r.Type)]++
		}
		for typ, n := range map[string]int{gate.TypeTalosSecrets: 1, gate.TypeTalosBootstrap: 1, gate.TypeConfigApply: 4, tDomain: 4} {
			if counts[typ] != n {
				t.Errorf("state holds %d %s, want %d", counts[typ], typ, n)
			}
		}
		for _, n := range append(slices.Clone(cps), w1) {
			applies := j.On(n.Name()).Applies()
			if len(applies) != 1 || !applies[0].Client.Insecure || applies[0].Mode() != machine.ApplyConfigurationRequest_AUTO || applies[0].Err != nil {
				t.Errorf("%s: want one first config, AUTO, in maintenance mode (no client certificate), got:\n%s", n.Name(), strings.Join(applies.Strings(), "\n"))
			}
		}
		s.oneAtATime(j, "cp-1", "cp-2", "cp-3")
		boots := j.Calls("Bootstrap").Succeeded()
		if len(boots) != 1 || !slices.Contains([]string{"cp-1", "cp-2", "cp-3"}, boots[0].Node) {
			t.Fatalf("want exactly one successful Bootstrap, on a control plane, got:\n%s", strings.Join(j.Calls("Bootstrap").Strings(), "\n"))
		}
		// No API server runs before etcd does, and the wait between two
		// control planes' applies is for updates (a first config restarts
		// nothing): none was asked.
		if asks := s.clusterAPI().NodeAsks(); len(asks) > 0 {
			t.Errorf("a control plane's API server was asked in the bring-up: %v", asks)
		}
		// The health check ran: each control plane's services and etcd members,
		// every node's memory; and none of its calls was answered so that
		// Talos' checks skip (Unimplemented, PermissionDenied).
		for _, n := range cps {
			for _, m := range []string{"ServiceList", "EtcdMemberList"} {
				if len(j.On(n.Name()).Calls(m).Succeeded()) == 0 {
					t.Errorf("%s: no %s answered: the health check did not reach it", n.Name(), m)
				}
			}
		}
		for _, n := range append(slices.Clone(cps), w1) {
			if len(j.On(n.Name()).Calls("Memory").Succeeded()) == 0 {
				t.Errorf("%s: no Memory answered: the health check did not reach it", n.Name())
			}
		}
		for _, e := range j {
			if c := status.Code(e.Err); e.Method != "" && e.Time.After(boots[0].Time) && (c == codes.Unimplemented || c == codes.PermissionDenied) {
				t.Errorf("a call after the bootstrap was answered %s (a health check skips on it): %s", c, e)
			}
		}
		reads, err := s.clusterAPI().Reads()
		if err != nil {
			t.Fatal(err)
		}
		listed := false
		for _, rs := range reads {
			listed = listed || slices.Contains(rs, "list nodes") && slices.Contains(rs, "list pods")
		}
		if !listed {
			t.Errorf("no client listed the nodes and pods: the health check's Kubernetes checks did not run: %v", reads)
		}
		if got := s.kubeconfigNode(); got != cp1.IP().String() {
			t.Errorf("the kubeconfig asks %s, want cp-1 (%s)", got, cp1.IP())
		}
	})

	step("kubeconfig renewal with cp-1 gone", func(t *testing.T, mark int) {
		// The state's admin certificate expires within the provider's 720h
		// window, and cp-1, the node the kubeconfig was asked of, is gone.
		s.c.SetKubeconfigTTL(0)
		if err := cp1.SetReachable(false); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cp1.SetReachable(true) }()
		old := s.kubeconfigCertificate(ctx)
		p := s.mustMilner("preview")
		if !strings.Contains(p.stdout, "update  milner-it-tcps-kubeconfig") || strings.Contains(p.stdout, "-apply") {
			t.Errorf("preview: want the kubeconfig's update alone:\n%s", p.out())
		}
		s.mustMilner("up", "--yes")
		renewed := s.kubeconfigCertificate(ctx)
		if !renewed.NotAfter.After(old.NotAfter.Add(720*time.Hour)) || renewed.SerialNumber.Cmp(old.SerialNumber) == 0 {
			t.Errorf("the kubeconfig's client certificate was not renewed: expires %v, was %v", renewed.NotAfter, old.NotAfter)
		}
		j := s.c.Journal()[mark:]
		if got := j.Calls("Kubeconfig").Succeeded().Nodes(); !slices.Equal(got, []string{"cp-2"}) {
			t.Errorf("Kubeconfig answered by %v, want cp-2 (the first control plane that answers)", got)
		}
		if a := j.Calls("ApplyConfiguration"); len(a) > 0 {
			t.Errorf("the renewal sent ApplyConfiguration:\n%s", strings.Join(a.Strings(), "\n"))
		}
		// A renewal changes no node: no health check, which would wait on
		// cp-1 until its timeout.
		if sl := j.Calls("ServiceList"); len(sl) > 0 {
			t.Errorf("the renewal ran the health check:\n%s", strings.Join(sl.Strings(), "\n"))
		}
		if got := s.kubeconfigNode(); got != cp2.IP().String() {
			t.Errorf("the kubeconfig asks %s, want cp-2 (%s)", got, cp2.IP())
		}
		if err := cp1.SetReachable(true); err != nil {
			t.Fatal(err)
		}
		// cp-1 back: the kubeconfig stays with cp-2, which answers.
		if p := s.mustMilner("preview"); !strings.Contains(p.stdout, "no changes") {
			t.Errorf("preview with cp-1 back: want no changes:\n%s", p.out())
		}
	})

	step("a live .cluster change, one control plane at a time", func(t *testing.T, mark int) {
		start := time.Now()
		s.clusterExtra = map[string]any{"oidc": map[string]any{"issuerUrl": "https://sso.example.org/realms/site", "clientId": "kubernetes",
			"usernameClaim": "preferred_username", "groupsClaim": "groups"}}
		s.apply()
		p := s.mustMilner("preview")
		for _, n := range cps {
			if !strings.Contains(p.stdout, "update  "+n.Name()+"-apply") || !strings.Contains(p.stdout, n.Name()+": applies live") {
				t.Errorf("preview: want %s's apply updated, live:\n%s", n.Name(), p.out())
			}
		}
		if strings.Contains(p.stdout, "w-1-apply") {
			t.Errorf("preview: the worker's config changes (the API server flags are a control plane's):\n%s", p.out())
		}
		s.mustMilner("up", "--yes")
		upDone := time.Now()
		j := s.c.Journal()[mark:]
		t.Logf("journal of the change (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		applies := j.Applies()
		if got := applies.Nodes(); !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3"}) {
			t.Errorf("applies reached %v, want cp-1, cp-2, cp-3", got)
		}
		for _, a := range applies {
			if a.Mode() != machine.ApplyConfigurationRequest_NO_REBOOT || a.Err != nil {
				t.Errorf("want NO_REBOOT, got %s", a)
			}
		}
		s.oneAtATime(j, "cp-1", "cp-2", "cp-3")
		// Between two control planes' applies, the previous one's own API
		// server went down (the kubelet's next poll restarted it) and then
		// served again, asked at its address (internal/apiready): the next
		// apply waited for the restart, not for the old API server.
		var asks []clusterapi.NodeAsk
		for _, a := range s.clusterAPI().NodeAsks() {
			if a.Time.After(start) {
				asks = append(asks, a)
			}
		}
		t.Logf("asks of the control planes' own API servers: %v", asks)
		restarts := s.clusterAPI().Restarts()
		t.Logf("API server restarts by the kubelet: %v", restarts)
		for _, a := range applies {
			t.Logf("apply to %s sent %s, answered %s", a.Node, a.Time.Format(time.StampMilli), a.Done.Format(time.StampMilli))
		}
		for i := range 2 {
			prev, next := applies.On(cps[i].Name())[0], applies.On(cps[i+1].Name())[0]
			if !slices.ContainsFunc(restarts, func(r clusterapi.Restart) bool {
				return r.Node == prev.Node && r.Down.After(prev.Done) && r.Up.Before(next.Time)
			}) {
				t.Errorf("%s's API server did not restart (down, then up) between its apply (answered %s) and %s's (sent %s)",
					prev.Node, prev.Done.Format(time.StampMilli), next.Node, next.Time.Format(time.StampMilli))
			}
			if !slices.ContainsFunc(asks, func(a clusterapi.NodeAsk) bool {
				return a.Node == prev.Node && a.Served && a.Time.After(prev.Done) && a.Time.Before(next.Time)
			}) {
				t.Errorf("%s's API server was not asked between its apply and %s's", prev.Node, next.Node)
			}
		}
		// The last control plane is waited for too, before the up goes on
		// to the apps: its restart would cut their requests.
		if i := slices.IndexFunc(restarts, func(r clusterapi.Restart) bool {
			return r.Node == "cp-3" && r.Down.After(applies.On("cp-3")[0].Done)
		}); i < 0 || !slices.ContainsFunc(asks, func(a clusterapi.NodeAsk) bool {
			return a.Node == "cp-3" && a.Served && a.Time.After(restarts[i].Up) && a.Time.Before(upDone)
		}) {
			t.Errorf("the up ended (%s) before the last control plane's API server was asked after its restart: %v", upDone.Format(time.StampMilli), asks)
		}
		for _, n := range cps {
			if !strings.Contains(string(n.Config()), "oidc-issuer-url") {
				t.Errorf("%s does not run the OIDC flags", n.Name())
			}
		}
		if e := j.Events("reboot"); len(e) > 0 {
			t.Errorf("a node rebooted:\n%s", strings.Join(e.Strings(), "\n"))
		}
	})

	step("milner up --replace cp-2", func(t *testing.T, mark int) {
		// The replaced domain boots from cp-2's kept OS disk: its Talos
		// comes back configured, its etcd member with it.
		// A ReplicaSet's pod runs on cp-2, and takes its time to stop: Talos'
		// Shutdown drains it first.
		kube := s.kube()
		web, removeWeb := s.webOn(ctx, kube, "cp-2")
		defer removeWeb()
		pods := s.podUIDs(ctx, kube)
		watched := s.watchPods(ctx, kube, "default")
		domains, applies, members := s.uuids(), s.stateIDs(gate.TypeConfigApply), s.c.EtcdMembers()
		stop := s.bootWhenReplaced(cp2, domains[s.domain("cp-2")], false)
		vmGone := vmReplacedAt(s.domain("cp-2"), domains[s.domain("cp-2")])
		up := s.mustMilner("up", "--yes", "--replace", "cp-2")
		stop()
		j := s.c.Journal()[mark:]
		t.Logf("journal of the replace (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		s.drainedBeforeDown(ctx, kube, j, watched(), vmGone(), "cp-2", web, pods, kubeletTiming().PodSecond)
		shutdowns := j.Calls("Shutdown")
		if got := shutdowns.Nodes(); !slices.Equal(got, []string{"cp-2"}) {
			t.Errorf("Shutdown reached %v, want cp-2 alone", got)
		} else if r, _ := shutdowns[0].Request.(*machine.ShutdownRequest); r.GetForce() {
			t.Errorf("cp-2's Shutdown was forced: no graceful shutdown")
		}
		after := s.uuids()
		for d, uuid := range domains {
			if changed := after[d] != uuid; changed != (d == s.domain("cp-2")) {
				t.Errorf("domains: %v, were %v; want cp-2's alone new", after, domains)
				break
			}
		}
		if got := s.stateIDs(gate.TypeConfigApply); !maps.Equal(got, applies) {
			t.Errorf("applies changed: %v, were %v", got, applies)
		}
		if a := j.Calls("ApplyConfiguration"); len(a) > 0 {
			t.Errorf("the replace sent ApplyConfiguration:\n%s", strings.Join(a.Strings(), "\n"))
		}
		// etcd's quorum: one member down at a time, and the same members
		// after (the kept disk kept cp-2's).
		for _, ev := range []string{"shutdown", "power-off", "reboot", "wipe"} {
			if got := j.Events(ev).Nodes(); len(got) > 0 && !slices.Equal(got, []string{"cp-2"}) {
				t.Errorf("%s events on %v: another node went down", ev, got)
			}
		}
		if r := j.Calls("EtcdRemoveMemberByID"); len(r) > 0 {
			t.Errorf("a replace on its own disk removed an etcd member:\n%s", strings.Join(r.Strings(), "\n"))
		}
		if got := s.c.EtcdMembers(); !maps.Equal(got, members) {
			t.Errorf("etcd members %v, were %v", got, members)
		}
		if !cp2.Status().Booted || cp2.Config() == nil {
			t.Errorf("cp-2 is not back with its config: %+v", cp2.Status())
		}
		// The kubeconfig asked cp-2, replaced in this run: it now names the
		// first control plane that answers, a change that calls nothing.
		if !strings.Contains(up.stdout, "update  milner-it-tcps-kubeconfig") || s.kubeconfigNode() != cp1.IP().String() {
			t.Errorf("the kubeconfig asks %s, want cp-1 (%s) from this replace on:\n%s", s.kubeconfigNode(), cp1.IP(), up.out())
		}
		if k := j.Calls("Kubeconfig"); len(k) > 0 {
			t.Errorf("the kubeconfig's move called Kubeconfig:\n%s", strings.Join(k.Strings(), "\n"))
		}
		s.hasNoChanges("up after the replace", s.mustMilner("up", "--yes"))
	})

	step("milner up --replace cp-2 --os-disk", func(t *testing.T, mark int) {
		domains, applies, members := s.uuids(), s.stateIDs(gate.TypeConfigApply), s.c.EtcdMembers()
		data, osVol := s.vol("cp-2", "data"), s.vol("cp-2", "os")
		dataInode := inode(t, data)
		old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := os.Chtimes(osVol, old, old); err != nil {
			t.Fatal(err)
		}
		stop := s.bootWhenReplaced(cp2, domains[s.domain("cp-2")], true)
		s.mustMilner("up", "--yes", "--replace", "cp-2", "--os-disk")
		stop()
		j := s.c.Journal()[mark:]
		t.Logf("journal of the --os-disk replace (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		if got := j.Calls("Shutdown").Nodes(); !slices.Equal(got, []string{"cp-2"}) {
			t.Errorf("Shutdown reached %v, want cp-2 alone", got)
		}
		removed := j.Calls("EtcdRemoveMemberByID").Succeeded()
		var id uint64
		if len(removed) == 1 {
			r, _ := removed[0].Request.(*machine.EtcdRemoveMemberByIDRequest)
			id = r.GetMemberId()
		}
		if len(removed) != 1 || id != members["cp-2"] {
			t.Errorf("want cp-2's member %x removed once, got:\n%s", members["cp-2"], strings.Join(j.Calls("EtcdRemoveMemberByID").Strings(), "\n"))
		}
		a := j.Applies()
		if len(a) != 1 || a[0].Node != "cp-2" || !a[0].Client.Insecure || a[0].Mode() != machine.ApplyConfigurationRequest_AUTO || a[0].Err != nil {
			t.Errorf("want one apply, cp-2's first config in maintenance mode (AUTO, no client certificate), got:\n%s", strings.Join(a.Strings(), "\n"))
		}
		got := s.c.EtcdMembers()
		if len(got) != 3 || got["cp-2"] == 0 || got["cp-2"] == members["cp-2"] || got["cp-1"] != members["cp-1"] || got["cp-3"] != members["cp-3"] {
			t.Errorf("etcd members %v, were %v: want cp-2 rejoined as a new member, the others kept", got, members)
		}
		after := s.uuids()
		for d, uuid := range domains {
			if changed := after[d] != uuid; changed != (d == s.domain("cp-2")) {
				t.Errorf("domains: %v, were %v; want cp-2's alone new", after, domains)
				break
			}
		}
		ids := s.stateIDs(gate.TypeConfigApply)
		for _, n := range []string{"cp-1", "cp-3", "w-1"} {
			if ids[n+"-apply"] != applies[n+"-apply"] {
				t.Errorf("%s's apply changed: %v, were %v", n, ids, applies)
			}
		}
		if fi, err := os.Stat(osVol); err != nil || !fi.ModTime().After(old.Add(24*time.Hour)) {
			t.Errorf("the OS volume %s is not new: %v", osVol, err)
		}
		if inode(t, data) != dataInode {
			t.Errorf("the data volume %s was recreated", data)
		}
		s.hasNoChanges("up after the --os-disk replace", s.mustMilner("up", "--yes"))
	})

	step("a Kubernetes bump, then milner upgrade", func(t *testing.T, _ int) {
		domains, applies := s.uuids(), s.stateIDs(gate.TypeConfigApply)
		s.clusterExtra["kubernetesVersion"] = "v1.32.4"
		s.apply()
		p := s.milner("preview")
		refused(t, "preview while the nodes run v1.32.3", p, "milner upgrade --stack it", "[rule versions-interlock]")
		if regexp.MustCompile(`(?m)^\s+(create|replace|delete)\s`).MatchString(p.stdout) || !strings.Contains(p.stdout, "update  w-1-apply") {
			t.Errorf("the bump's preview plans more than updates:\n%s", p.out())
		}
		refused(t, "up while the nodes run v1.32.3", s.milner("up", "--yes"), "milner upgrade --stack it")
		// (Deciding the apply modes sent dry runs, which change nothing.)
		mark := len(s.c.Journal())
		up := s.mustMilner("upgrade", "--yes")
		j := s.c.Journal()[mark:]
		t.Logf("journal of the upgrade (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		if u := j.Calls("Upgrade"); len(u) > 0 {
			t.Errorf("a Kubernetes bump upgraded Talos:\n%s", strings.Join(u.Strings(), "\n"))
		}
		// upgrade-k8s pre-pulled the control plane images on each control
		// plane and the kubelet's on every node.
		for _, n := range append(slices.Clone(cps), w1) {
			pulls := 0
			for _, e := range j.On(n.Name()).Calls("ImagePull").Succeeded() {
				if r, _ := e.Request.(*machine.ImagePullRequest); strings.HasSuffix(r.GetReference(), ":v1.32.4") {
					pulls++
				}
			}
			if want := map[bool]int{true: 4, false: 1}[n != w1]; pulls != want {
				t.Errorf("%s: %d images of v1.32.4 pulled, want %d", n.Name(), pulls, want)
			}
		}
		for _, a := range j.Applies() {
			if a.Resolved() != machine.ApplyConfigurationRequest_NO_REBOOT || a.Err != nil {
				t.Errorf("an apply of the upgrade: want it live, got %s", a)
			}
		}
		if e := j.Events("reboot"); len(e) > 0 {
			t.Errorf("a node rebooted:\n%s", strings.Join(e.Strings(), "\n"))
		}
		for _, n := range append(slices.Clone(cps), w1) {
			cfg, err := configloader.NewFromBytes(n.Config())
			if err != nil {
				t.Fatal(err)
			}
			images := []string{cfg.Machine().Kubelet().Image()}
			if n != w1 {
				c := cfg.Cluster()
				images = append(images, c.APIServer().Image(), c.ControllerManager().Image(), c.Scheduler().Image(), c.Proxy().Image())
			}
			for _, img := range images {
				if !strings.HasSuffix(img, ":v1.32.4") {
					t.Errorf("%s runs %s", n.Name(), img)
				}
			}
		}
		for _, n := range append(slices.Clone(cps), w1) {
			if v := s.kubeletVersion(n.Name()); v != "v1.32.4" {
				t.Errorf("Node %s: kubelet %q, want v1.32.4", n.Name(), v)
			}
		}
		if !strings.Contains(up.stdout, "successfully updated") {
			t.Errorf("upgrade-k8s's progress is missing from the output:\n%s", up.out())
		}
		if got := s.uuids(); !maps.Equal(got, domains) {
			t.Errorf("domains changed: %v, were %v", got, domains)
		}
		if got := s.stateIDs(gate.TypeConfigApply); !maps.Equal(got, applies) {
			t.Errorf("applies were replaced: %v, were %v", got, applies)
		}
		s.hasNoChanges("up after the upgrade", s.mustMilner("up", "--yes"))
	})

	step("add a worker", func(t *testing.T, mark int) {
		domains, applies := s.uuids(), s.stateIDs(gate.TypeConfigApply)
		s.grow(w2)
		p := s.mustMilner("preview")
		s.onlyAdds(p, "w-2", nil)
		if !regexp.MustCompile(`(?m)^w-2 .*maintenance mode: not configured yet`).MatchString(p.stdout) {
			t.Errorf("the versions table does not show w-2 in maintenance mode:\n%s", p.stdout)
		}
		s.mustMilner("up", "--yes")
		j := s.c.Journal()[mark:]
		a := j.Applies()
		if len(a) != 1 || a[0].Node != "w-2" || !a[0].Client.Insecure || a[0].Mode() != machine.ApplyConfigurationRequest_AUTO || a[0].Err != nil {
			t.Errorf("want one first config, to w-2, AUTO in maintenance mode, got:\n%s", strings.Join(a.Strings(), "\n"))
		}
		s.kept(domains, applies)
		s.hasNoChanges("up after adding w-2", s.mustMilner("up", "--yes"))
	})

	step("add a fourth control plane", func(t *testing.T, mark int) {
		// Two nodes in one run are refused, naming the second.
		s.nodes = append(s.nodes, node{Name: "w-3", Role: "worker", VCPU: 1, Memory: 1024, OSDisk: 10, Data: 1, Address: tnode{"w-3", 23, false}.addr(tcpsSubnet).String(), MAC: s.mac(0x23)})
		s.grow(cp4)
		refused(t, "preview adding cp-4 and w-3", s.milner("preview"), "[rule one-new-node]", "w-3: the plan adds 2 nodes")
		s.nodes = slices.DeleteFunc(s.nodes, func(n node) bool { return n.Name == "w-3" })
		s.apply()
		domains, applies := s.uuids(), s.stateIDs(gate.TypeConfigApply)
		p := s.mustMilner("preview")
		if !strings.Contains(p.out(), "4 control planes") {
			t.Errorf("no warning of an even etcd membership:\n%s", p.out())
		}
		// The other control planes' configs do not change: the endpoint is
		// the VIP and no certSAN names a node.
		s.onlyAdds(p, "cp-4", nil)
		s.controlPlaneAdded(mark, s.mustMilner("up", "--yes"), "cp-4", domains, applies)
	})

	step("add a fifth control plane", func(t *testing.T, mark int) {
		s.grow(cp5)
		domains, applies := s.uuids(), s.stateIDs(gate.TypeConfigApply)
		p := s.mustMilner("preview")
		if strings.Contains(p.out(), "control planes: etcd's quorum") {
			t.Errorf("five control planes warned of:\n%s", p.out())
		}
		s.onlyAdds(p, "cp-5", nil)
		s.controlPlaneAdded(mark, s.mustMilner("up", "--yes"), "cp-5", domains, applies)
	})

	// The snapshot, its key and its revision, for the restore.
	backups := t.TempDir()
	key, snapshot := filepath.Join(backups, "key.txt"), filepath.Join(backups, "etcd.snapshot.age")
	var snapshotRev int64
	configMap := func(name string) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": name}, "data": map[string]any{"written": time.Now().String()}}
	}

	step("milner etcd snapshot", func(t *testing.T, mark int) {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(key, []byte(id.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out := snapshot
		// An object the restore must bring back.
		if b, code, err := s.clusterAPI().Do(http.MethodPost, "/api/v1/namespaces/kube-system/configmaps", "", configMap("before-snapshot")); err != nil || code != http.StatusCreated {
			t.Fatalf("create a config map: %d %s %v", code, b, err)
		}
		var taken etcdbackup.Result
		decoded(t, "etcd snapshot", s.mustMilner("etcd", "snapshot", "--out", out, "--recipient", id.Recipient().String(), "--json"), &taken)
		if taken.Path != out || taken.Cluster != s.cluster || !strings.HasPrefix(taken.Node, "cp-") {
			t.Errorf("etcd snapshot --json: %+v, want %s of cluster %s from a control plane", taken, out, s.cluster)
		}
		if got := s.c.Journal()[mark:].Calls("EtcdSnapshot").Succeeded().Nodes(); len(got) != 1 || !strings.HasPrefix(got[0], "cp-") {
			t.Errorf("EtcdSnapshot answered on %v, want one control plane", got)
		}
		var stdout, stderr strings.Builder
		inspect := exec.Command(s.bin, "etcd", "inspect", out, "--identity", key, "--json")
		inspect.Stdout, inspect.Stderr = &stdout, &stderr
		if err := inspect.Run(); err != nil {
			t.Fatalf("milner etcd inspect: %v\n%s%s", err, stdout.String(), stderr.String())
		}
		var m struct {
			Cluster   string `json:"cluster"`
			Revision  int64  `json:"revision"`
			TotalKeys int    `json:"totalKeys"`
		}
		if err := json.Unmarshal([]byte(stdout.String()), &m); err != nil || m.Cluster != s.cluster || m.Revision < 2 || m.TotalKeys == 0 {
			t.Errorf("inspect: %+v (%v), want cluster %s and the API server's keys:\n%s", m, err, s.cluster, stdout.String())
		}
		t.Logf("snapshot of the API server's etcd: %+v", m)
		snapshotRev = m.Revision
	})

	step("lose every control plane's etcd, then milner etcd restore", func(t *testing.T, mark int) {
		api := s.clusterAPI()
		configMapCode := func(name string) int {
			_, code, _ := api.Do(http.MethodGet, "/api/v1/namespaces/kube-system/configmaps/"+name, "", nil)
			return code
		}
		if b, code, err := api.Do(http.MethodPost, "/api/v1/namespaces/kube-system/configmaps", "", configMap("after-snapshot")); err != nil || code != http.StatusCreated {
			t.Fatalf("create a config map: %d %s %v", code, b, err)
		}
		restore := []string{"etcd", "restore", "--from", snapshot, "--identity", key, "--node", "cp-1", "--yes"}
		r := s.milner(append(restore, "--json")...)
		refused(t, "restore while etcd has quorum", r, "etcd still has quorum", "nothing was changed")
		// Under --json the refusal is the failure document on stdout.
		var doc struct {
			Error    string `json:"error"`
			Rule     string `json:"rule"`
			ExitCode int    `json:"exitCode"`
		}
		decoded(t, "etcd restore", r, &doc)
		if r.code != 5 || doc.ExitCode != 5 || !strings.Contains(doc.Error, "etcd still has quorum") {
			t.Errorf("restore while etcd has quorum: exit %d, document %+v, want 5 (refused) in both", r.code, doc)
		}
		if c := s.c.Journal()[mark:].Calls("EtcdRecover"); len(c) > 0 {
			t.Errorf("a refused restore uploaded:\n%s", strings.Join(c.Strings(), "\n"))
		}

		// The disaster: etcd fails on every control plane, its data lost
		// (the test API server's etcd stands for theirs).
		var cpNodes []*talosapi.Node
		for _, n := range s.nodes {
			if n.Role == "controlplane" {
				cpNodes = append(cpNodes, s.c.Node(n.Name))
			}
		}
		for _, n := range cpNodes {
			n.SetEtcdRunning(false)
		}
		if err := api.LoseEtcd(); err != nil {
			t.Fatal(err)
		}
		// The runbook's first step, as talosctl sends it: `talosctl -n
		// <node> reset --graceful=false --reboot
		// --system-labels-to-wipe=EPHEMERAL` on every control plane.
		resets := len(s.c.Journal())
		for _, n := range cpNodes {
			if _, err := s.operatorClient(ctx, n).MachineClient.Reset(ctx, &machine.ResetRequest{
				Graceful: false, Reboot: true,
				SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}},
			}); err != nil {
				t.Fatalf("the operator's reset of %s's EPHEMERAL: %v", n.Name(), err)
			}
		}
		s.operatorResets = s.c.Journal()[resets:].Calls("Reset")
		deadline := time.Now().Add(time.Minute)
		for _, n := range cpNodes {
			for len(s.c.Journal()[resets:].On(n.Name()).Events("reset")) == 0 || !n.Status().Booted {
				if time.Now().After(deadline) {
					t.Fatalf("%s did not come back from the reset: %+v", n.Name(), n.Status())
				}
				time.Sleep(200 * time.Millisecond)
			}
		}

		// The restore.
		r = s.timedMilner(restore...)
		if r.code != 0 {
			t.Fatalf("milner etcd restore: exit %d:\n%s", r.code, r.out())
		}
		j := s.c.Journal()[mark:]
		if got := j.Calls("EtcdRecover").Succeeded().Nodes(); !slices.Equal(got, []string{"cp-1"}) {
			t.Errorf("EtcdRecover answered on %v, want cp-1 alone", got)
		}
		boots := j.Calls("Bootstrap")
		if !slices.Equal(boots.Succeeded().Nodes(), []string{"cp-1"}) || !boots[0].Request.(*machine.BootstrapRequest).GetRecoverEtcd() {
			t.Errorf("want one Bootstrap with recover_etcd, on cp-1, got:\n%s", strings.Join(boots.Strings(), "\n"))
		}
		if got := s.c.EtcdRecoveredRevision(); got != snapshotRev {
			t.Errorf("recovered revision %d, want the snapshot's %d", got, snapshotRev)
		}
		// The other control planes rejoin, one learner at a time.
		deadline = time.Now().Add(2 * time.Minute)
		for {
			members, joined := s.c.EtcdMembers(), 0
			for _, n := range cpNodes {
				if id := n.Status().EtcdMemberID; id != 0 && members[n.Name()] == id {
					joined++
				}
			}
			if joined == len(cpNodes) && len(members) == len(cpNodes) && len(s.c.EtcdLearners()) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 2m: %d of %d control planes rejoined; members %v, learners %v", joined, len(cpNodes), members, s.c.EtcdLearners())
			}
			time.Sleep(500 * time.Millisecond)
		}
		// The cluster's data is the snapshot's.
		if got := configMapCode("before-snapshot"); got != http.StatusOK {
			t.Errorf("the config map written before the snapshot: %d, want 200", got)
		}
		if got := configMapCode("after-snapshot"); got != http.StatusNotFound {
			t.Errorf("the config map written after the snapshot: %d, want 404", got)
		}
		// Health: the runbook's check, and the engine's (Talos' cluster
		// health check, read by every run), with nothing to change.
		s.mustMilner("status", "--versions")
		s.hasNoChanges("up after the restore", s.mustMilner("up", "--yes"))
	})

	step("remove a worker", func(t *testing.T, mark int) {
		release := s.keepPodOn("w-2")
		domains, applies := s.uuids(), s.stateIDs(gate.TypeConfigApply)
		s.drop("w-2")
		refused(t, "preview without --remove", s.milner("preview"), "[rule remove-named]", "--remove w-2")
		p := s.mustMilner("preview", "--remove", "w-2")
		s.onlyRemoves(p, "w-2")
		s.volumesProtected("w-2", true)
		r := s.milner("up", "--yes", "--remove", "w-2", "--drain-timeout", "8s")
		refused(t, "up --remove w-2 with the budget", r, "pod kube-system/keeper", "PodDisruptionBudget kube-system/keeper")
		if sd := s.c.Journal()[mark:].Calls("Shutdown"); len(sd) > 0 {
			t.Errorf("a drain that failed went on to Shutdown:\n%s", strings.Join(sd.Strings(), "\n"))
		}
		s.kept(domains, applies)
		s.volumesProtected("w-2", true)
		release()
		up := s.mustMilner("up", "--yes", "--remove", "w-2")
		j := s.c.Journal()[mark:]
		t.Logf("journal of w-2's removal (%d entries):\n%s", len(j), strings.Join(j.Strings(), "\n"))
		if sd := j.Calls("Shutdown"); !slices.Equal(sd.Nodes(), []string{"w-2"}) {
			t.Errorf("Shutdown reached %v, want w-2 alone", sd.Nodes())
		} else if r, _ := sd[0].Request.(*machine.ShutdownRequest); r.GetForce() {
			t.Errorf("w-2's Shutdown was forced")
		}
		if rm := j.Calls("EtcdRemoveMemberByID"); len(rm) > 0 {
			t.Errorf("a worker's removal removed an etcd member:\n%s", strings.Join(rm.Strings(), "\n"))
		}
		s.removed(up, "w-2", domains, applies)
		s.hasNoChanges("up after removing w-2", s.mustMilner("up", "--yes"))
	})

	// Five control planes down to three, one per run.
	for _, cp := range []string{"cp-5", "cp-4"} {
		step("remove a control plane: "+cp, func(t *testing.T, mark int) {
			domains, applies, members := s.uuids(), s.stateIDs(gate.TypeConfigApply), s.c.EtcdMembers()
			s.drop(cp)
			up := s.timedMilner("up", "--yes", "--remove", cp)
			if up.code != 0 {
				t.Fatalf("up --remove %s: exit %d:\n%s", cp, up.code, up.out())
			}
			j := s.c.Journal()[mark:]
			t.Logf("journal of %s's removal (%d entries):\n%s", cp, len(j), strings.Join(j.Strings(), "\n"))
			rm := j.Calls("EtcdRemoveMemberByID").Succeeded()
			sd := j.Calls("Shutdown")
			if len(rm) != 1 || rm[0].Node == cp || rm[0].Request.(*machine.EtcdRemoveMemberByIDRequest).GetMemberId() != members[cp] {
				t.Errorf("want %s's member %x removed once through another control plane, got:\n%s", cp, members[cp], strings.Join(j.Calls("EtcdRemoveMemberByID").Strings(), "\n"))
			}
			if !slices.Equal(sd.Nodes(), []string{cp}) {
				t.Errorf("Shutdown reached %v, want %s alone", sd.Nodes(), cp)
			}
			if len(rm) == 1 && len(sd) == 1 && !sd[0].Time.After(rm[0].Done) {
				t.Errorf("%s was shut down (%s) before its member's removal was answered (%s)", cp, sd[0].Time.Format(time.StampMilli), rm[0].Done.Format(time.StampMilli))
			}
			// The order milner reports: drain, member removal, Shutdown, the
			// Kubernetes node, then the engine's delete of the VM.
			inOrder(t, up.stdout, cp+": drained", "etcd member", "Talos shuts down", "its VM has stopped", "Kubernetes node deleted")
			got := s.c.EtcdMembers()
			delete(members, cp)
			if !maps.Equal(got, members) {
				t.Errorf("etcd members %v, want %v", got, members)
			}
			if boots := j.Calls("Bootstrap"); len(boots) > 0 {
				t.Errorf("a removal bootstrapped:\n%s", strings.Join(boots.Strings(), "\n"))
			}
			s.removed(up, cp, domains, applies)
			s.hasNoChanges("up after removing "+cp, s.mustMilner("up", "--yes"))
		})
	}

	step("a removal that would lose quorum", func(t *testing.T, mark int) {
		cp3 := s.c.Node("cp-3")
		cp3.SetEtcdRunning(false)
		nodes := slices.Clone(s.nodes)
		s.drop("cp-2")
		refused(t, "preview --remove cp-2 with cp-3's etcd down", s.milner("preview", "--remove", "cp-2"), "--remove cp-2", "quorum")
		refused(t, "up --remove cp-2 with cp-3's etcd down", s.milner("up", "--yes", "--remove", "cp-2"), "--remove cp-2", "quorum")
		cp3.SetEtcdRunning(true)
		j := s.c.Journal()[mark:]
		for _, m := range []string{"EtcdRemoveMemberByID", "Shutdown"} {
			if c := j.Calls(m); len(c) > 0 {
				t.Errorf("a refused removal sent %s:\n%s", m, strings.Join(c.Strings(), "\n"))
			}
		}
		s.volumesProtected("cp-2", true)
		s.nodes = nodes
		s.apply()
		s.hasNoChanges("up with cp-2 declared again", s.mustMilner("up", "--yes"))
	})

	step("re-adding a removed node", func(t *testing.T, mark int) {
		// The teardown refuses while the pool holds kept volumes (libvirt
		// deletes a pool only empty), before deleting anything.
		refused(t, "teardown with kept volumes", s.milner("teardown", "--yes"), "[rule teardown-kept-volumes]", "vol-delete "+s.vol("w-2", "os"), "vol-delete "+s.vol("cp-4", "data"), "vol-delete "+s.vol("cp-5", "os"))
		if len(s.domains()) != 4 {
			t.Errorf("the refused teardown deleted domains: %v", s.domains())
		}
		// A control plane's kept OS volume holds a removed etcd member: the
		// commands its removal printed delete them (the runbook).
		for _, cp := range []string{"cp-4", "cp-5"} {
			for _, kind := range []string{"os", "data"} {
				virsh(t, "vol-delete", s.vol(cp, kind))
			}
		}
		// w-2 declared again while its kept volumes exist: refused,
		// naming them, nothing overwritten.
		inodes := s.volumeInodes()
		s.nodes = append(s.nodes, node{Name: "w-2", Role: "worker", VCPU: 1, Memory: 1024, OSDisk: 10, Data: 1, Address: w2.addr(tcpsSubnet).String(), MAC: s.mac(0x22)})
		s.apply()
		refused(t, "preview re-adding w-2", s.milner("preview"), s.cluster+"-w-2-os", s.cluster+"-w-2-data", "exists on the host but not in the state")
		// A worker's are adopted (the runbook): adopt --all, then the up
		// creates its VM on them; it boots from its own OS disk, with its
		// config.
		s.mustMilner("adopt", "--all")
		d := s.c.Node("w-2")
		stop := s.bootWhenReplaced(d, "", false)
		rejoined := s.joinWhenBooted(d, w2)
		adopt := len(s.c.Journal())
		s.mustMilner("up", "--yes")
		stop()
		<-rejoined
		got := s.volumeInodes()
		for _, kind := range []string{"os", "data"} {
			if v := s.vol("w-2", kind); got[v] != inodes[v] || inodes[v] == 0 {
				t.Errorf("w-2's %s volume is not the kept file: inode %d, was %d", kind, got[v], inodes[v])
			}
		}
		j := s.c.Journal()[adopt:]
		if e := j.On("w-2").Events("boot"); len(e) != 1 || e[0].Detail != "configured" {
			t.Errorf("w-2 did not boot once from its own disk with its config: %s", strings.Join(e.Strings(), "; "))
		}
		if len(j.On("w-2").Applies()) == 0 {
			t.Errorf("no config applied to w-2")
		}
		for _, a := range j.Applies() {
			if a.Node != "w-2" || a.Err != nil || len(j.On("w-2").Events("reboot")) > 0 {
				t.Errorf("want w-2's apply alone, with no reboot, got %s", a)
			}
		}
		s.hasNoChanges("up after re-adding w-2", s.mustMilner("up", "--yes"))
	})

	step("milner teardown", func(t *testing.T, mark int) {
		s.mustMilner("teardown", "--yes")
		if d := s.domains(); len(d) > 0 {
			t.Errorf("domains left after the teardown: %v", d)
		}
		if e := s.c.Journal()[mark:].Events("reset"); len(e) > 0 {
			t.Errorf("the teardown reset a node:\n%s", strings.Join(e.Strings(), "\n"))
		}
	})

	for m, calls := range map[string]talosapi.Journal{"Reset": s.milnerResets(), "Reboot": s.c.Journal().Calls("Reboot")} {
		if len(calls) > 0 {
			t.Errorf("%s was sent:\n%s", m, strings.Join(calls.Strings(), "\n"))
		}
	}
}

// requireTalosTools skips the test without the tools a Talos-layer
// scenario runs.
func requireTalosTools(t *testing.T) {
	t.Helper()
	for _, b := range []string{"pulumi", "pulumi-resource-libvirt", "pulumi-resource-talos", "etcd", "kube-apiserver"} {
		if _, err := os.Stat(repo + "/.tools/bin/" + b); err != nil {
			t.Skipf("%v (scripts/tools.sh pulumi libvirt talos kubeapi)", err)
		}
	}
}

// oneAtATime requires each named node's first non-dry-run apply in j to
// be sent after the previous one's was answered.
func (s *talosLayer) oneAtATime(j talosapi.Journal, nodes ...string) {
	s.t.Helper()
	var prev *talosapi.Entry
	for _, n := range nodes {
		a := j.On(n).Applies()
		if len(a) == 0 {
			s.t.Errorf("%s: no apply", n)
			return
		}
		if prev != nil && !a[0].Time.After(prev.Done) {
			s.t.Errorf("%s's apply was sent at %s, before %s's was answered at %s", n, a[0].Time.Format(time.StampMilli), prev.Node, prev.Done.Format(time.StampMilli))
		}
		prev = &a[0]
	}
}

// grow adds n to the running cluster: its double and its entry in the
// stack file now, and, once it holds its first config, what its kubelet
// writes (its Node, mirror pods and kube-proxy pod) and, for a control
// plane, its API server's address.
func (s *talosLayer) grow(n tnode) {
	s.t.Helper()
	d := s.addNode(n)
	s.apply()
	api := s.clusterAPI()
	if n.controlPlane {
		if err := api.Relay(d); err != nil {
			s.t.Fatal(err)
		}
	}
	s.joinWhenBooted(d, n)
}

// joinWhenBooted registers the node's kubelet objects with the cluster's
// API server (clusterapi Join) once its double has booted with a config,
// as its kubelet registers then; the channel closes when done.
func (s *talosLayer) joinWhenBooted(d *talosapi.Node, n tnode) <-chan struct{} {
	api, done := s.clusterAPI(), make(chan struct{})
	go func() {
		defer close(done)
		for d.Config() == nil || !d.Status().Booted {
			time.Sleep(200 * time.Millisecond)
		}
		if err := api.Join(clusterapi.Node{Name: n.name, IP: n.addr(s.subnet), ControlPlane: n.controlPlane}); err != nil {
			fmt.Fprintf(os.Stderr, "%s's kubelet: %v\n", n.name, err)
		}
	}()
	return done
}

// keepPodOn puts a Running pod kube-system/keeper on node, kept there by
// a PodDisruptionBudget that allows no disruption (a Pending pod is
// evicted whatever its budget); release deletes the budget.
func (s *talosLayer) keepPodOn(node string) (release func()) {
	t := s.t
	t.Helper()
	api := s.clusterAPI()
	if err := api.ReadyPod("kube-system", "keeper", "keeper", node, nil); err != nil {
		t.Fatal(err)
	}
	pdb := map[string]any{"metadata": map[string]any{"name": "keeper"},
		"spec": map[string]any{"minAvailable": 1, "selector": map[string]any{"matchLabels": map[string]any{"k8s-app": "keeper"}}}}
	if b, code, err := api.Do(http.MethodPost, "/apis/policy/v1/namespaces/kube-system/poddisruptionbudgets", "", pdb); err != nil || code != http.StatusCreated {
		t.Fatalf("create the budget: %d %s %v", code, b, err)
	}
	return func() {
		t.Helper()
		if b, code, err := api.Do(http.MethodDelete, "/apis/policy/v1/namespaces/kube-system/poddisruptionbudgets/keeper", "", nil); err != nil || code != http.StatusOK {
			t.Fatalf("delete the budget: %d %s %v", code, b, err)
		}
	}
}

// controlPlaneAdded requires an up that added the control plane node to
// have sent it one first config, AUTO in maintenance mode, any other
// control plane's apply live, no Bootstrap, and ended once node was a
// voting etcd member; every other domain and apply kept; a no-op after.
func (s *talosLayer) controlPlaneAdded(mark int, up cmdResult, node string, domains, applies map[string]string) {
	t := s.t
	t.Helper()
	j := s.c.Journal()[mark:]
	first := j.On(node).Applies()
	if len(first) != 1 || !first[0].Client.Insecure || first[0].Mode() != machine.ApplyConfigurationRequest_AUTO || first[0].Err != nil {
		t.Errorf("%s: want one first config, AUTO in maintenance mode, got:\n%s", node, strings.Join(first.Strings(), "\n"))
	}
	for _, a := range j.Applies() {
		if a.Node != node && (a.Resolved() != machine.ApplyConfigurationRequest_NO_REBOOT || a.Err != nil) {
			t.Errorf("an apply to a running control plane: want it live, got %s", a)
		}
	}
	if s.c.Node(node).Status().EtcdMemberID == 0 {
		t.Errorf("%s is no etcd member after the up", node)
	}
	// It joined as a learner; the up ended once it was promoted.
	if l := s.c.EtcdLearners(); len(l) > 0 || !strings.Contains(up.stdout, node+": a voting etcd member") {
		t.Errorf("the up ended with learners %v, or did not wait for %s's promotion:\n%s", l, node, up.out())
	}
	if boots := j.Calls("Bootstrap"); len(boots) > 0 {
		t.Errorf("adding a control plane bootstrapped:\n%s", strings.Join(boots.Strings(), "\n"))
	}
	for _, n := range s.nodes {
		if n.Role == "controlplane" {
			delete(applies, n.Name+"-apply") // a .cluster change may update them, live
		}
	}
	s.kept(domains, applies)
	s.hasNoChanges("up after adding "+node, s.mustMilner("up", "--yes"))
}

// onlyAdds requires a preview (its delta by layer) to create only node's
// resources and to update at most the applies of the nodes in updates,
// each live.
func (s *talosLayer) onlyAdds(p cmdResult, node string, updates []string) {
	s.t.Helper()
	creates := 0
	for _, m := range regexp.MustCompile(`(?m)^\s+(create|update|replace|delete|import)\s+(\S+)`).FindAllStringSubmatch(p.stdout, -1) {
		switch op, name := m[1], m[2]; {
		case op == "create" && (name == node || strings.HasSuffix(name, "-"+node) || strings.Contains(name, "-"+node+"-") || strings.HasPrefix(name, node+"-")):
			creates++
		case op == "update" && slices.Contains(updates, strings.TrimSuffix(name, "-apply")):
		default:
			s.t.Errorf("adding %s plans %s %s", node, op, name)
		}
	}
	if creates == 0 {
		s.t.Errorf("adding %s creates nothing:\n%s", node, p.out())
	}
}

// kept requires the domains and the applies of the given ids unchanged.
func (s *talosLayer) kept(domains, applies map[string]string) {
	s.t.Helper()
	now, nowApplies := s.uuids(), s.stateIDs(gate.TypeConfigApply)
	for name, id := range domains {
		if now[name] != id {
			s.t.Errorf("domain %s: %s, was %s", name, now[name], id)
		}
	}
	for name, id := range applies {
		if nowApplies[name] != id {
			s.t.Errorf("apply %s: %s, was %s", name, nowApplies[name], id)
		}
	}
}

// kubeletVersion is the kubelet version the cluster's Node of name
// reports ("" and an error logged when it cannot be read).
func (s *talosLayer) kubeletVersion(name string) string {
	s.t.Helper()
	b, code, err := s.clusterAPI().Do(http.MethodGet, "/api/v1/nodes/"+name, "", nil)
	var node struct {
		Status struct {
			NodeInfo struct {
				KubeletVersion string `json:"kubeletVersion"`
			} `json:"nodeInfo"`
		} `json:"status"`
	}
	if err == nil && code == http.StatusOK {
		err = json.Unmarshal(b, &node)
	} else if err == nil {
		err = fmt.Errorf("GET answered %d", code)
	}
	if err != nil {
		s.t.Errorf("Node %s: %v", name, err)
	}
	return node.Status.NodeInfo.KubeletVersion
}

// kubeconfigNode is the node input of the stack's kubeconfig in state.
func (s *talosLayer) kubeconfigNode() string {
	s.t.Helper()
	for _, r := range s.exported().Resources {
		if string(r.Type) == gate.TypeKubeconfig {
			node, _ := r.Inputs["node"].(string)
			return node
		}
	}
	return ""
}

// drop takes a node out of the stack file's milner:nodes.
func (s *talosLayer) drop(name string) {
	s.nodes = slices.DeleteFunc(s.nodes, func(n node) bool { return n.Name == name })
	s.apply()
}

// onlyRemoves requires a preview (its delta by layer) to delete only
// node's resources: its VM, its Talos config apply and its volumes.
func (s *talosLayer) onlyRemoves(p cmdResult, node string) {
	s.t.Helper()
	deletes := 0
	for _, m := range regexp.MustCompile(`(?m)^\s+(create|update|replace|delete|import)\s+(\S+)`).FindAllStringSubmatch(p.stdout, -1) {
		switch op, name := m[1], m[2]; {
		case op == "delete" && (name == node || name == s.domain(node) || name == node+"-apply" || strings.HasPrefix(name, s.domain(node)+"-")):
			deletes++
		default:
			s.t.Errorf("removing %s plans %s %s", node, op, name)
		}
	}
	if deletes != 5 {
		s.t.Errorf("removing %s deletes %d resources, want 5 (VM, apply, TalosNode, two volumes):\n%s", node, deletes, p.out())
	}
}

// volumesProtected requires node's volumes in state, each protected (or
// not) and not retained on delete.
func (s *talosLayer) volumesProtected(node string, protected bool) {
	s.t.Helper()
	found := 0
	for _, r := range s.exported().Resources {
		if name := r.URN.Name(); string(r.Type) == gate.TypeLibvirtVolume && strings.HasPrefix(name, s.domain(node)+"-") {
			found++
			if r.Protect != protected || r.RetainOnDelete {
				s.t.Errorf("volume %s: protect %v, retainOnDelete %v; want protect %v, not retained", name, r.Protect, r.RetainOnDelete, protected)
			}
		}
	}
	if found != 2 {
		s.t.Errorf("state holds %d volumes of %s, want 2", found, node)
	}
}

// removed requires node's removal done: its domain gone, the others and
// the other applies kept, its apply and volumes out of state, its volume
// files on the host and listed by the up with their delete command, its
// Kubernetes node gone; and no Reset.
func (s *talosLayer) removed(up cmdResult, node string, domains, applies map[string]string) {
	s.t.Helper()
	delete(domains, s.domain(node))
	delete(applies, node+"-apply")
	if slices.Contains(s.domains(), s.domain(node)) {
		s.t.Errorf("%s's domain is still defined", node)
	}
	s.kept(domains, applies)
	for _, r := range s.exported().Resources {
		if name := r.URN.Name(); name == node+"-apply" || strings.HasPrefix(name, s.domain(node)) {
			s.t.Errorf("%s is still in state", name)
		}
	}
	for _, kind := range []string{"os", "data"} {
		if _, err := os.Stat(s.vol(node, kind)); err != nil {
			s.t.Errorf("%s's %s volume is not kept on the host: %v", node, kind, err)
		}
		if want := "vol-delete " + s.vol(node, kind); !strings.Contains(up.stdout, want) {
			s.t.Errorf("the up does not list %q:\n%s", want, up.out())
		}
	}
	if _, code, err := s.clusterAPI().Do(http.MethodGet, "/api/v1/nodes/"+node, "", nil); err != nil || code != http.StatusNotFound {
		s.t.Errorf("Kubernetes node %s: GET answered %d (%v), want 404", node, code, err)
	}
	if r := s.milnerResets(); len(r) > 0 {
		s.t.Errorf("Reset was sent:\n%s", strings.Join(r.Strings(), "\n"))
	}
}

// inOrder requires each of want in out, each after the one before.
func inOrder(t *testing.T, out string, want ...string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(out[at:], w)
		if i < 0 {
			t.Errorf("after %q the output lacks %q:\n%s", out[:at], w, out)
			return
		}
		at += i + len(w)
	}
}
