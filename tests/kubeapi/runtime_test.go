//go:build integration && runtime

package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/harness"
)

// TestAppsRunOnARealKubelet runs the apps layer's pods for real: a kubelet,
// kube-proxy, CoreDNS, containerd and runc beside the real API server,
// controller manager and scheduler, in a network namespace
// (inNodeNamespace, startNode). `milner up` installs the unmodified
// local-path-provisioner chart (0.0.33), an app of the test chart with a
// PVC and the unmodified vault chart (0.29.1, Milner's hardened profile:
// three raft servers over TLS with the test's certificate), charts fetched
// through milner:chartMirrors, and waits for them (milner:waitForApps).
// Then Vault is taken through its runbook (runVault): initialised in
// vault-0, each pod unsealed with `milner vault unseal` through a
// port-forward, the followers joining vault-0 over TLS by their names in
// the cluster's DNS, all three raft voters. The same up installs the
// unmodified MetalLB chart (0.16.1, L2 mode) with the stack's pool on the
// node network; Vault, exposed at vaultHost, is then reached from the
// workstation's namespace through the address MetalLB's controller gave
// its Service and its speaker's ARP answer (reachVault). Last, a value
// change rolls hello's release alone, the apps gate naming hello's
// Deployment while it rolls (rollValueChange).
//
// Images: none can be pulled here, so each is assembled and served by the
// in-process registry containerd mirrors for docker.io, registry.k8s.io,
// quay.io and ghcr.io.
//   - rancher/local-path-provisioner:v0.0.33: the provisioner built from
//     its module at the chart's appVersion (tools/local-path-provisioner);
//     the real image adds Alpine, which the provisioner does not run.
//   - hashicorp/vault:1.18.1: vault built from its module at the chart's
//     appVersion (tools/vault) with the module's entrypoint script
//     (vaultImage); Alpine is replaced by busybox and dumb-init by a
//     stand-in.
//   - quay.io/metallb/controller:v0.16.1 and quay.io/metallb/speaker:v0.16.1:
//     the two binaries built from MetalLB's module at the chart's
//     appVersion (tools/metallb), as its Dockerfiles build them
//     (CGO_ENABLED=0) onto distroless/static; the real speaker image also
//     carries frr-metrics and cp-tool, which only its FRR mode runs.
//   - busybox:latest, the provisioner's helper image: Debian's
//     busybox-static (a stand-in for the Docker Hub image of the same
//     program), with the three applets the chart's setup and teardown
//     scripts run.
//   - registry.k8s.io/pause:3.10, the sandbox and the test chart's image:
//     a stand-in (tests/kubeapi/images/pause).
//
// Deviations from a real cluster, each a value of this test's stack: one
// node, so Vault's server.affinity is emptied (the chart's one-server-per-
// node anti-affinity would leave two Pending); Vault's injector is off (its
// image, hashicorp/vault-k8s, is not built here).
//
// Build tags integration and runtime: it needs Debian's containerd, runc
// and CNI plugins and the node's tools (`make runtime`).
func TestAppsRunOnARealKubelet(t *testing.T) {
	if !inNodeNamespace(t) {
		return
	}
	volumes := config.DefaultStoragePath
	if _, err := os.Stat(volumes); err == nil {
		t.Fatalf("%s exists on this machine: the scenario's volumes go there (the path Milner declares) and it will not touch what is already there", volumes)
	}
	made := volumes // the topmost directory the helper pod will make
	for d := filepath.Dir(volumes); d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = d
	}
	t.Cleanup(func() { _ = os.RemoveAll(made) })

	mirror := startChartMirror(t, chartsDir(t))
	// The API server reaches the kubelet (exec, port-forward) at the
	// node's address: its name, the default first choice, resolves nowhere
	// here.
	api := startAPIServer(t, "--bind-address=0.0.0.0", "--advertise-address="+nodeIP, "--endpoint-reconciler-type=lease",
		"--kubelet-preferred-address-types=InternalIP")
	api.startControllerManager()
	node := api.startNode()
	node.pushImage("docker.io/rancher/local-path-provisioner:v0.0.33", image{
		files: map[string]string{"/usr/bin/local-path-provisioner": filepath.Join(toolsBin, "local-path-provisioner")}})
	node.pushImage("docker.io/library/busybox:latest", busybox("sh", "mkdir", "rm"))
	node.pushImage("docker.io/hashicorp/vault:"+vaultVersion, vaultImage(t))
	requireTools(t, "metallb-controller", "metallb-speaker")
	for _, c := range []string{"controller", "speaker"} {
		// As MetalLB's Dockerfiles make them: the one binary, its entrypoint.
		node.pushImage("quay.io/metallb/"+c+":"+metallbVersion, image{entrypoint: []string{"/" + c},
			files: map[string]string{"/" + c: filepath.Join(toolsBin, "metallb-"+c)}})
	}

	hello := testApp("hello")
	vault := app{Name: "vault", Namespace: "vault", PodSecurity: "baseline",
		Chart: publishedChart(t, config.VaultChart, "0.29.1"),
		// One node: the chart's anti-affinity (one server per node) would
		// leave two of the three Pending, as on any one-node cluster; the
		// injector's image (hashicorp/vault-k8s) is not built here.
		Values: map[string]any{"server": map[string]any{"affinity": ""}, "injector": map[string]any{"enabled": false}},
		Vault:  map[string]any{"replicas": 3, "dataSize": "1Gi", "auditSize": "1Gi"},
		Expose: map[string]any{"host": vaultHost, "address": vaultLBAddress}}
	s := newAppsScenario(t, api, hello, vault)
	s.storage = map[string]any{"chart": publishedChart(t, config.StorageChartName, config.DefaultStorageChart.Version)}
	s.loadBalancer = map[string]any{
		"chart": publishedChart(t, config.LoadBalancerChartName, config.DefaultLoadBalancerChart.Version),
		"pool":  map[string]any{"start": lbPoolStart, "end": lbPoolEnd},
	}
	s.mirrors = mirror.Mirrors
	s.waitForApps = true
	s.apply()
	start := time.Now()
	out := s.up("install")
	t.Logf("SCENARIO install from empty with pods running: ok in %s", time.Since(start).Round(time.Millisecond))
	// The preview names every chart fetched through the mirrors, by app.
	for app, chart := range map[string]any{config.StorageAppName: s.storage["chart"], config.LoadBalancerAppName: s.loadBalancer["chart"], vault.Name: vault.Chart} {
		if line := fmt.Sprintf("  %s: %s -> ", app, chart.(map[string]any)["repo"]); !strings.Contains(out, line) {
			t.Errorf("milner up did not report %q among the charts fetched through milner:chartMirrors", line)
		}
	}

	requirePodsReady(t, api, config.DefaultStorageNamespace, "hello")
	requireBound(t, api, volumes, "hello", "hello-data")

	// Vault starts sealed: its pods run but are not Ready until the
	// runbook's unseal, and the rolling upgrade's apps gate (the one
	// `milner upgrade` asks before and after each node) names each sealed.
	on := true
	gate, err := upgrade.NewApps(&config.Config{
		Storage: config.StorageConfig{Enabled: &on, Namespace: config.DefaultStorageNamespace},
		Apps:    []config.AppConfig{{Name: "hello", Namespace: "hello"}, {Name: "vault", Namespace: "vault", Vault: &config.VaultConfig{}}},
	}, []byte(api.Kubeconfig))
	must(t, err)
	waitFor(t, "Vault's three pods Running", 3*time.Minute, func() bool {
		running := 0
		for _, p := range api.items("/api/v1/namespaces/vault/pods") {
			if p["status"].(map[string]any)["phase"] == "Running" {
				running++
			}
		}
		return running == 3
	})
	waitFor(t, "the apps gate naming each Vault pod sealed", time.Minute, func() bool {
		err := gate.Ready(context.Background())
		t.Logf("apps gate before unseal: %v", err)
		var notReady *upgrade.NotReadyError
		return errors.As(err, &notReady) && strings.Count(err.Error(), "is sealed") == 3
	})
	start = time.Now()
	peers := runVault(t, api, s.vaultTLS.CA)
	t.Logf("SCENARIO Vault initialised, unsealed and joined: ok in %s; vault operator raft list-peers:\n%s", time.Since(start).Round(time.Millisecond), peers)
	for _, p := range []string{"vault-0", "vault-1", "vault-2"} {
		if !strings.Contains(peers, p) {
			t.Errorf("raft peers: %s missing", p)
		}
	}
	waitFor(t, "the apps gate ready", time.Minute, func() bool {
		err := gate.Ready(context.Background())
		if err != nil {
			t.Logf("apps gate after unseal: %v", err)
		}
		return err == nil
	})
	requirePodsReady(t, api, "vault", config.DefaultLoadBalancerNamespace)
	for _, p := range []string{"vault-0", "vault-1", "vault-2"} {
		requireBound(t, api, volumes, "vault", "data-"+p, "audit-"+p)
	}

	start = time.Now()
	reachVault(t, s)
	t.Logf("SCENARIO Vault reached at its host name through MetalLB: ok in %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	rollValueChange(t, s, gate)
	t.Logf("SCENARIO a value change rolls one release: ok in %s", time.Since(start).Round(time.Millisecond))
}

// reachVault reaches Vault as the operator does, from the workstation's
// side of the node network (the lan namespace): MetalLB's controller gave
// Vault's UI Service the address milner:apps[].expose declares, its speaker
// answers ARP for it (the workstation's neighbour entry for the address is
// the node's link: nothing else answers for it, kube-proxy's iptables mode
// binds no address), and `milner vault status` at the host name, resolved
// by the record `milner status` prints (a hosts line stands in for the
// site's DNS), finds Vault unsealed over TLS with the operator's CA.
func reachVault(t *testing.T, s *appsScenario) {
	t.Helper()
	api := s.api
	waitFor(t, "Vault's UI Service given "+vaultLBAddress, time.Minute, func() bool {
		svc, err := api.get("/api/v1/namespaces/vault/services/vault-ui")
		if err != nil {
			return false
		}
		lb, _ := svc["status"].(map[string]any)["loadBalancer"].(map[string]any)
		ingress, _ := lb["ingress"].([]any)
		return len(ingress) == 1 && ingress[0].(map[string]any)["ip"] == vaultLBAddress
	})

	code, out := s.milner("status")
	record := vaultHost + ". IN A " + vaultLBAddress
	if code != 0 || !strings.Contains(out, record) {
		t.Fatalf("milner status: exit %d; want the record %q:\n%s", code, record, out)
	}
	lan := lanNetns()
	write(t, filepath.Join("/etc/netns", lan, "hosts"), "127.0.0.1 localhost\n"+vaultLBAddress+" "+vaultHost+"\n")
	ca := filepath.Join(t.TempDir(), "vault-ca.crt")
	write(t, ca, s.vaultTLS.CA)
	bin := harness.Milner(t, repo)
	waitFor(t, "milner vault status at https://"+vaultHost+":8200 from the workstation's side", time.Minute, func() bool {
		// `ip netns exec` mounts /etc/netns/<lan>/hosts over /etc/hosts.
		out, err := exec.Command("ip", "netns", "exec", lan, bin, "vault", "status",
			"--addr", "https://"+vaultHost+":8200", "--ca-file", ca).CombinedOutput()
		t.Logf("milner vault status --addr https://%s:8200 (in %s): %v\n%s", vaultHost, lan, err, out)
		return err == nil
	})

	link, err := net.InterfaceByName("eth0")
	must(t, err)
	neigh, err := exec.Command("ip", "-n", lan, "neigh", "show", vaultLBAddress).CombinedOutput()
	must(t, err)
	t.Logf("the workstation's neighbour entry: %s(the node's eth0 is %s)", neigh, link.HardwareAddr)
	if !strings.Contains(string(neigh), "lladdr "+link.HardwareAddr.String()) {
		t.Errorf("%s's neighbour entry %q: want the node's link %s (MetalLB's speaker answering ARP)", vaultLBAddress, neigh, link.HardwareAddr)
	}
}

// rollValueChange changes one value of the hello app and applies it with
// `milner up`: the preview updates only hello's release; while the up
// runs, the apps gate asked the moment hello's Deployment takes the new
// spec names that Deployment and nothing else (Vault stays Ready); after
// it, the gate is ready, only hello's release has a new revision, hello's
// pod is replaced by one with the new value, and Vault's pods are the
// same pods (their UIDs).
func rollValueChange(t *testing.T, s *appsScenario, gate *upgrade.Apps) {
	t.Helper()
	api := s.api
	uids := func(ns string) []string {
		var out []string
		for _, p := range api.items("/api/v1/namespaces/" + ns + "/pods") {
			out = append(out, str(p, "metadata", "uid"))
		}
		slices.Sort(out)
		return out
	}
	releases := map[string]release{}
	for _, ns := range []string{"hello", "vault", config.DefaultStorageNamespace, config.DefaultLoadBalancerNamespace} {
		for _, r := range api.items("/api/v1/namespaces/" + ns + "/secrets?labelSelector=owner%3Dhelm") {
			name := r["metadata"].(map[string]any)["labels"].(map[string]any)["name"].(string)
			releases[ns+"/"+name] = s.release(ns, name)
		}
	}
	vaultPods, helloPods := uids("vault"), uids("hello")
	deployment := "/apis/apps/v1/namespaces/hello/deployments/hello"
	generation := api.mustGet(deployment)["metadata"].(map[string]any)["generation"]

	s.apps[0].Values["message"] = "hello again"
	s.apply()
	requireChanges(t, "value changed", s.preview("value changed"), "update hello-release")

	done := make(chan string, 1)
	go func() {
		code, out := s.milner("up", "--yes")
		done <- fmt.Sprintf("exit %d:\n%s", code, out)
	}()
	var during error
	for asked := false; !asked; {
		select {
		case out := <-done:
			t.Fatalf("milner up ended before hello's Deployment took the new spec: %s", out)
		case <-time.After(50 * time.Millisecond):
		}
		if d, err := api.get(deployment); err == nil && d["metadata"].(map[string]any)["generation"] != generation {
			during, asked = gate.Ready(context.Background()), true
		}
	}
	out := <-done
	t.Logf("apps gate as hello's Deployment rolls: %v", during)
	var notReady *upgrade.NotReadyError
	if !errors.As(during, &notReady) || !strings.Contains(during.Error(), "deployment hello/hello") || strings.Contains(during.Error(), "vault") {
		t.Errorf("apps gate as hello rolls: %v; want hello's Deployment named, and not Vault", during)
	}
	if !strings.HasPrefix(out, "exit 0:") {
		t.Fatalf("value changed: milner up: %s", out)
	}
	must(t, gate.Ready(context.Background()))

	for key, before := range releases {
		ns, name, _ := strings.Cut(key, "/")
		after := s.release(ns, name)
		want := before.revision
		if key == "hello/hello" {
			want++
		}
		t.Logf("release %s: revision %d -> %d (%s)", key, before.revision, after.revision, after.status)
		if after.revision != want || after.status != "deployed" {
			t.Errorf("release %s: revision %d (%s); want %d, deployed", key, after.revision, after.status, want)
		}
	}
	if got := uids("vault"); !slices.Equal(got, vaultPods) {
		t.Errorf("Vault's pods %v after hello's change; want the same pods %v", got, vaultPods)
	}
	var pods []map[string]any
	waitFor(t, "hello's old pod gone", time.Minute, func() bool {
		pods = api.items("/api/v1/namespaces/hello/pods")
		return !slices.ContainsFunc(pods, func(p map[string]any) bool { return slices.Contains(helloPods, str(p, "metadata", "uid")) })
	})
	for _, p := range pods {
		if env := mustJSON(t, p["spec"].(map[string]any)["containers"]); !strings.Contains(env, `"value":"hello again"`) {
			t.Errorf("hello's pod %s: containers %s; want MESSAGE hello again", str(p, "metadata", "name"), env)
		}
	}
	requirePodsReady(t, api, "hello", "vault")
	requireBound(t, api, config.DefaultStoragePath, "hello", "hello-data")
}

// requirePodsReady checks that every pod of the namespaces is Running and
// Ready, and logs each.
func requirePodsReady(t *testing.T, api *apiServer, namespaces ...string) {
	t.Helper()
	for _, ns := range namespaces {
		pods := api.items("/api/v1/namespaces/" + ns + "/pods")
		if len(pods) == 0 {
			t.Errorf("namespace %s: no pods", ns)
		}
		for _, p := range pods {
			meta, _ := p["metadata"].(map[string]any)
			if strings.HasPrefix(meta["name"].(string), "helper-pod-") {
				continue // the provisioner's helper of one volume, gone when done
			}
			status, _ := p["status"].(map[string]any)
			t.Logf("pod %s/%s: %s, Ready %s, on %v", meta["namespace"], meta["name"], status["phase"], condition(p, "Ready"), p["spec"].(map[string]any)["nodeName"])
			if status["phase"] != "Running" || condition(p, "Ready") != "True" {
				t.Errorf("pod %s/%s: %s, Ready %q; want Running and Ready", meta["namespace"], meta["name"], status["phase"], condition(p, "Ready"))
			}
		}
	}
}

// requireBound checks that each PVC of ns is Bound to a local-path volume
// under volumes (milner:storage.path) whose directory the provisioner's
// helper pod made on the node, and logs each.
func requireBound(t *testing.T, api *apiServer, volumes, ns string, claims ...string) {
	t.Helper()
	for _, c := range claims {
		pvc := api.mustGet("/api/v1/namespaces/" + ns + "/persistentvolumeclaims/" + c)
		phase := pvc["status"].(map[string]any)["phase"]
		volume, _ := pvc["spec"].(map[string]any)["volumeName"].(string)
		if phase != "Bound" || volume == "" {
			t.Errorf("PVC %s/%s: %v, volume %q; want Bound", ns, c, phase, volume)
			continue
		}
		spec := api.mustGet("/api/v1/persistentvolumes/" + volume)["spec"].(map[string]any)
		path, _ := spec["hostPath"].(map[string]any)["path"].(string)
		t.Logf("PVC %s/%s: Bound to %s, class %v, hostPath %s", ns, c, volume, spec["storageClassName"], path)
		if !strings.HasPrefix(path, volumes+"/") {
			t.Errorf("volume %s at %q; want under %s (milner:storage.path)", volume, path, volumes)
		}
		if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
			t.Errorf("volume directory %s on the node: %v", path, err)
		}
	}
}
