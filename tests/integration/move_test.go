//go:build integration

package integration

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/clusterapi"
	"github.com/milner/milner/tests/talosapi"
)

// The move's scenario: its id (cluster milner-it-move) and subnet.
const (
	moveID     = "move"
	moveSubnet = 49
)

// moveFrom is the Milner a user had before Talos v1.13 support: main as
// it last landed pinning Talos v1.9.5 and Kubernetes v1.32.3 (machinery
// v1.11.5), the commit whose stacks the move starts from.
const moveFrom = "d9a46fa"

// TestMoveToTodaysTalos: a cluster made by the Milner of moveFrom, moved
// to today's Talos and Kubernetes as a user moves it, through the real
// Talos plugin on the real engine, the libvirt substrate real and each
// node's Talos API a tests/talosapi double (the harness of
// TestTalosLayerOnRealPlugin). One control plane, the Talos layer alone:
// what the move checks is the path, and each node takes it alone (a node
// more adds its reboot and its kubelet's 10-second wait to every stage);
// the rolling of several nodes, one at a time, is
// TestTalosControlPlanesOnRealPlugin's Kubernetes bump and upgrade.
//
//  1. moveFrom's `milner up` makes the cluster on Talos v1.9.5 and
//     Kubernetes v1.32.3;
//  2. the user upgrades Milner: today's preview of that stack plans no
//     change at all, nor does its up, which applies nothing;
//  3. talosVersion and kubernetesVersion set to the supported-versions
//     table's newest row, `milner upgrade` moves the nodes along the
//     upgrade path (the latest patch of every minor between, Kubernetes one
//     minor per stage): every node upgraded in place by Talos, none reset
//     or rebooted by Milner, no domain or apply recreated;
//  4. a no-op after: the preview plans nothing.
//
// Each output line of the upgrade is logged with the seconds since it
// started: the path's stages and their times.
//
// The move to today's Talos (`tests/integration` TestMoveToTodaysTalos,
// real engine, real Talos plugin, libvirt domains, the Talos API doubles,
// one control plane, the Talos layer alone): the `milner` of `d9a46fa`
// (main as it last pinned v1.9.5, built from the clone's history) makes the
// cluster on Talos v1.9.5 and Kubernetes v1.32.3; today's `milner` previews
// and ups that stack with no change at all and applies nothing; with
// `talosVersion` v1.13.9 and `kubernetesVersion` v1.36.3 declared, preview
// and up are refused, and `milner upgrade` takes the path of
// `stacks/config/supported-versions.txt` in ten stages: Talos v1.9.6,
// Kubernetes v1.32.4, v1.10.9, v1.33.6, v1.11.6, v1.34.1, v1.12.11, v1.35.4,
// v1.13.9, v1.36.3. Each node takes one `MachineService.Upgrade` per minor
// (five), none a Reset or Reboot, every domain and apply keeps its id, each
// Node's kubelet reports v1.36.3, and a preview and an up after plan
// nothing. The verb took 249 s with three control planes at pathTiming:
// 5 s per node and Talos stage (milner upgrade's 5-second reboot poll)
// and about 37 s per Kubernetes stage, 30 s of it upgrade-k8s' kubelet
// step (talos v1.13.9 pkg/cluster/kubernetes/kubelet.go: it asks for the
// Node's new version every 10 s, and a restarted kubelet has not reported
// it at the first ask). With one control plane the verb took 83 s and the
// whole test 134 s (385 s with three nodes at CI's tenth, in the last
// clean-clone CI). The nodes went from v1.12 to v1.13 through
// `MachineService.Upgrade`, as talosctl v1.13.9 does for a node below
// v1.13.0; Milner's LifecycleService flow for nodes already on v1.13 has not
// run.
//
// The apps gate between nodes (`upgrade.Apps.Ready`) runs on a real
// kube-apiserver with kube-controller-manager (`tests/kubeapi`
// pathTiming is the move's time. What it checks is the path: the stages,
// what each node is sent, what is kept. How long Talos and the kubelet
// take is the subject of the issue-45 scenarios (TestTalosLayerOnRealPlugin,
// TestTalosControlPlanesOnRealPlugin: Talos' durations scaled tenfold).
// Here a reboot and the played kubelet take a hundredth of Talos' own
// (rebootDowntime's 60 s, clusterapi.RealKubelet), which took the verb from
// 356 s at CI's tenth to the time in the move's doc comment below; the
// reboot waits are then milner upgrade's own 5-second poll. With
// MILNER_DOUBLE_TIMING=real the move takes Talos' own time too.
func pathTiming() []layerOption {
	if realTiming() {
		return nil
	}
	real := clusterapi.RealKubelet
	return []layerOption{
		withKubelet(clusterapi.KubeletTiming{Poll: real.Poll / 100, Restart: real.Restart / 100, OrphanGC: real.OrphanGC / 100, PodSecond: real.PodSecond / 100}),
		withCluster(talosapi.WithRebootDowntime(60 * time.Second / 100)),
	}
}

func TestMoveToTodaysTalos(t *testing.T) {
	requireTalosTools(t)
	nodes := []tnode{{"cp-1", 11, true}}
	addrs := []netip.Addr{netip.AddrFrom4([4]byte{10, 199, moveSubnet, 240})}
	for _, n := range nodes {
		addrs = append(addrs, n.addr(moveSubnet))
	}
	old := milnerAt(t, moveFrom) // built outside, where the module cache is reachable
	if !inTalosNamespace(t, addrs...) {
		return
	}
	newest := config.Supported[len(config.Supported)-1]
	s := newTalosLayer(t, moveID, moveSubnet, nodes, pathTiming()...)
	s.c.SetKubeconfigTTL(0) // Talos' one year: no renewal in this scenario
	s.apply()
	step := func(name string, f func(t *testing.T, mark int)) { s.step(t, name, f) }
	var domains, applies map[string]string

	step("moveFrom's milner makes the cluster", func(t *testing.T, mark int) {
		was := s.bin
		s.bin = old
		defer func() { s.bin = was }()
		s.mustMilner("up", "--yes")
		domains, applies = s.uuids(), s.stateIDs(gate.TypeConfigApply)
		if len(domains) != len(nodes) || len(applies) != len(nodes) {
			t.Fatalf("moveFrom's up made domains %v and applies %v, want %d of each", domains, applies, len(nodes))
		}
		for _, n := range s.c.Nodes() {
			if v := n.Status().Version; v != talosFrom {
				t.Errorf("%s runs %s, want %s", n.Name(), v, talosFrom)
			}
		}
	})

	step("today's milner previews that stack", func(t *testing.T, mark int) {
		s.hasNoChanges("today's preview of moveFrom's stack", s.mustMilner("preview"))
		s.hasNoChanges("today's up of moveFrom's stack", s.mustMilner("up", "--yes"))
		if a := s.c.Journal()[mark:].Applies(); len(a) > 0 {
			t.Errorf("today's first up applied:\n%s", strings.Join(a.Strings(), "\n"))
		}
	})

	step("milner upgrade to the newest row", func(t *testing.T, mark int) {
		s.talos = newest.Latest
		s.clusterExtra = map[string]any{"kubernetesVersion": newest.Kubernetes}
		s.boot = filepath.Join(s.dir, "boot-"+newest.Latest+".qcow2")
		run(t, "qemu-img", "create", "-q", "-f", "qcow2", s.boot, "64M")
		s.apply()
		p := s.milner("preview")
		refused(t, "preview while the nodes run "+talosFrom, p, "milner upgrade --stack it", "[rule versions-interlock]")
		if regexp.MustCompile(`(?m)^\s+(create|replace|delete)\s`).MatchString(p.stdout) {
			t.Errorf("the bump's preview plans more than updates:\n%s", p.out())
		}
		start := time.Now()
		up := s.timedMilner("upgrade", "--yes")
		if up.code != 0 {
			t.Fatalf("milner upgrade: exit %d:\n%s", up.code, up.out())
		}
		t.Logf("milner upgrade %s -> %s, Kubernetes %s -> %s: %s", talosFrom, newest.Latest, kubeFrom, newest.Kubernetes, time.Since(start).Round(time.Second))
		j := s.c.Journal()[mark:]
		// Each node took one Upgrade per minor of the path (the latest
		// patch of v1.9 too), and runs the newest row's release.
		want := len(config.Supported)
		for _, n := range s.c.Nodes() {
			if got := len(j.On(n.Name()).Calls("Upgrade").Succeeded()); got != want {
				t.Errorf("%s: %d upgrades, want %d (one per minor of the path)", n.Name(), got, want)
			}
			if v := n.Status().Version; v != newest.Latest {
				t.Errorf("%s runs %s after the upgrade, want %s", n.Name(), v, newest.Latest)
			}
		}
		for _, n := range s.c.Nodes() {
			if v := s.kubeletVersion(n.Name()); v != newest.Kubernetes {
				t.Errorf("Node %s: kubelet %q, want %s", n.Name(), v, newest.Kubernetes)
			}
		}
		for _, m := range []string{"Reset", "Reboot"} {
			if calls := j.Calls(m); len(calls) > 0 {
				t.Errorf("%s was sent:\n%s", m, strings.Join(calls.Strings(), "\n"))
			}
		}
		if got := s.uuids(); !maps.Equal(got, domains) {
			t.Errorf("domains changed: %v, were %v", got, domains)
		}
		if got := s.stateIDs(gate.TypeConfigApply); !maps.Equal(got, applies) {
			t.Errorf("applies were replaced: %v, were %v", got, applies)
		}
	})

	step("a no-op after", func(t *testing.T, mark int) {
		s.hasNoChanges("preview after the move", s.mustMilner("preview"))
		s.hasNoChanges("up after the move", s.mustMilner("up", "--yes"))
		if a := s.c.Journal()[mark:].Applies(); len(a) > 0 {
			t.Errorf("the no-op up applied:\n%s", strings.Join(a.Strings(), "\n"))
		}
	})
	nodesNow := []string{}
	for _, n := range s.c.Nodes() {
		nodesNow = append(nodesNow, n.Name()+" "+n.Status().Version)
	}
	slices.Sort(nodesNow)
	t.Logf("nodes at the end: %s", strings.Join(nodesNow, ", "))
}

// timedMilner is milner with each line of its output logged, as it comes,
// with the seconds since the command started.
func (s *milnerScenario) timedMilner(args ...string) cmdResult {
	s.t.Helper()
	var stdout, stderr strings.Builder
	cmd := s.command(args, nil, &stderr)
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			stdout.WriteString(sc.Text() + "\n")
			fmt.Fprintf(os.Stderr, "%7.1fs  %s\n", time.Since(start).Seconds(), sc.Text())
		}
	}()
	err := cmd.Run()
	_ = pw.Close()
	<-done
	return s.exited(args, err, &stdout, &stderr)
}

// milnerAt builds the milner of a commit of this repository (read from
// its git objects, so the clone needs its history) once per machine into
// the temp directory, and returns its path. Its modules come from the
// module cache or proxy as any build's do.
func milnerAt(t *testing.T, rev string) string {
	t.Helper()
	bin := filepath.Join(os.TempDir(), "milner-at-"+rev, "milner")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if os.Getenv(talosNetnsEnv) != "" {
		t.Fatalf("%s was not built before the namespace", bin)
	}
	src := t.TempDir()
	archive := exec.Command("git", "-C", repo, "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var aerr strings.Builder
	archive.Stderr = &aerr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s (the clone needs the commit; a shallow clone lacks it): %v: %s", rev, err, aerr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatal(err)
	}
	tmp := bin + ".tmp"
	build := exec.Command("go", "build", "-o", tmp, "./cmd/milner")
	build.Dir = src
	start := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/milner at %s: %v: %s", rev, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the milner of %s in %s", rev, time.Since(start).Round(time.Second))
	return bin
}
