//go:build integration && runtime

package kubeapi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
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
// the cluster's DNS, all three raft voters.
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
// and CNI plugins and the node's tools (`make runtime`). MetalLB's
// controller and speaker and a rolling value change are not in it yet.
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

	hello := testApp("hello")
	vault := app{Name: "vault", Namespace: "vault", PodSecurity: "baseline",
		Chart: publishedChart(t, config.VaultChart, "0.29.1"),
		// One node: the chart's anti-affinity (one server per node) would
		// leave two of the three Pending, as on any one-node cluster; the
		// injector's image (hashicorp/vault-k8s) is not built here.
		Values: map[string]any{"server": map[string]any{"affinity": ""}, "injector": map[string]any{"enabled": false}},
		Vault:  map[string]any{"replicas": 3, "dataSize": "1Gi", "auditSize": "1Gi"}}
	s := newAppsScenario(t, api, hello, vault)
	s.storage = map[string]any{"chart": publishedChart(t, config.StorageChartName, config.DefaultStorageChart.Version)}
	s.mirrors = mirror.Mirrors
	s.waitForApps = true
	s.apply()
	start := time.Now()
	s.up("install")
	t.Logf("SCENARIO install from empty with pods running: ok in %s", time.Since(start).Round(time.Millisecond))

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
	requirePodsReady(t, api, "vault")
	for _, p := range []string{"vault-0", "vault-1", "vault-2"} {
		requireBound(t, api, volumes, "vault", "data-"+p, "audit-"+p)
	}
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
