//go:build integration

package kubeapi

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/milner/milner/stacks/config"
)

// publishedChart is a chart pin at the source its maintainers publish it
// to (config.PublishedCharts), as a user's stack says it.
func publishedChart(t *testing.T, chart, version string) map[string]any {
	t.Helper()
	for _, p := range config.PublishedCharts {
		if p.Name == chart {
			return map[string]any{"repo": p.Repo, "name": chart, "version": version}
		}
	}
	t.Fatalf("%s has no record of where it is published (config.PublishedCharts)", chart)
	return nil
}

// TestRealChartsOnRealAPI installs the unmodified upstream charts (Vault,
// Woodpecker, local-path-provisioner) at their published coordinates,
// fetched through milner:chartMirrors from a loopback chart repository and
// OCI registry, with Milner's program and `milner up`, against a real
// kube-apiserver whose kube-controller-manager turns the charts'
// StatefulSets and Deployments into Pods and PVCs (Pending: no scheduler
// or kubelet runs, and nothing waits for them).
//
//   - The real charts on a real API server (`tests/kubeapi`
//     `TestRealChartsOnRealAPI`, 79 s on a quiet two-core machine): the
//     unmodified upstream charts at their published coordinates, fetched
//     through `milner:chartMirrors` (Vault from a loopback chart repository;
//     Woodpecker and local-path-provisioner from an in-process TLS OCI
//     registry, the provider given its CA through `SSL_CERT_FILE`), with
//     Milner's program and `milner up` on a real kube-apiserver with
//     kube-controller-manager (no scheduler, no kubelet: pods stay Pending).
//     Install from empty (every object accepted; the controllers' 5 pods
//     admitted, no FailedCreate; 4 PVCs on the default class; the Secrets the
//     pods read present); a no-op preview plans nothing; one value changed
//     updates one release; vault 0.29.1 → 0.30.1, woodpecker 3.2.0 → 3.2.1 and
//     local-path-provisioner 0.0.33 → 0.0.34, each on its own, upgrade exactly
//     that release in place (same StatefulSet/Deployment and PVC uids); a value
//     Vault's `values.schema.json` rejects fails `milner up` with Helm's
//     schema error and leaves the release unchanged.
func TestRealChartsOnRealAPI(t *testing.T) {
	mirror := startChartMirror(t, chartsDir(t))
	api := startAPIServer(t)
	api.startControllerManager()

	vault := app{Name: "vault", Namespace: "vault", PodSecurity: "baseline",
		Chart: publishedChart(t, config.VaultChart, "0.29.1"), Values: map[string]any{},
		Vault: map[string]any{"replicas": 1, "dataSize": "1Gi", "auditSize": "1Gi"}}
	woodpecker := app{Name: "woodpecker", Namespace: "woodpecker", PodSecurity: "baseline",
		Chart:  publishedChart(t, config.WoodpeckerChart, "3.2.0"),
		Values: map[string]any{"agent": map[string]any{"replicaCount": 1}},
		Woodpecker: map[string]any{
			"host": "https://ci.example.org", "admins": []any{"alice"},
			"forge": map[string]any{"kind": "forgejo", "url": forgeURL()},
		}}
	s := newAppsScenario(t, api, vault, woodpecker)
	s.storage = map[string]any{"chart": publishedChart(t, config.StorageChartName, config.DefaultStorageChart.Version)}
	s.mirrors = mirror.Mirrors
	s.apply()
	releases := map[string]string{ // release -> namespace
		"vault": "vault", "woodpecker": "woodpecker", config.StorageAppName: config.DefaultStorageNamespace,
	}
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		t.Logf("SCENARIO %s: ok in %s", what, time.Since(start).Round(time.Millisecond))
	}

	// Install from empty.
	timed("install from empty", func() {
		out := s.up("install")
		if !strings.Contains(out, "charts fetched through milner:chartMirrors") || !strings.Contains(out, mirror.Registry) {
			t.Fatalf("install: milner up did not show the mirror:\n%s", out)
		}
		for rel, ns := range releases {
			if r := s.release(ns, rel); r.revision != 1 || r.status != "deployed" {
				t.Fatalf("release %s: want revision 1 deployed, got %+v", rel, r)
			}
		}
		pods := waitForControllers(t, api, slices.Collect(mapValues(releases)))
		t.Logf("install: the controllers made %d pods, no FailedCreate", len(pods))
		requireClaimsOnDefaultClass(t, api, "vault", "woodpecker")
		requireSecretsThePodsRead(t, api, pods)
	})
	revisions := map[string]int{"vault": 1, "woodpecker": 1, config.StorageAppName: 1}
	requireRevisions := func(what string) {
		t.Helper()
		for rel, want := range revisions {
			if r := s.release(releases[rel], rel); r.revision != want || r.status != "deployed" {
				t.Fatalf("%s: release %s: want revision %d deployed, got %+v", what, rel, want, r)
			}
		}
	}
	vaultSTS := s.uid("/apis/apps/v1/namespaces/vault/statefulsets/vault")
	serverSTS := s.uid("/apis/apps/v1/namespaces/woodpecker/statefulsets/woodpecker-server")
	storageDeploy := s.uid("/apis/apps/v1/namespaces/" + config.DefaultStorageNamespace + "/deployments/" + config.StorageAppName)
	claims := claimUIDs(t, api, "vault", "woodpecker")
	requireSame := func(what string) {
		t.Helper()
		for path, want := range map[string]string{
			"/apis/apps/v1/namespaces/vault/statefulsets/vault":                                                    vaultSTS,
			"/apis/apps/v1/namespaces/woodpecker/statefulsets/woodpecker-server":                                   serverSTS,
			"/apis/apps/v1/namespaces/" + config.DefaultStorageNamespace + "/deployments/" + config.StorageAppName: storageDeploy,
		} {
			if got := s.uid(path); got != want {
				t.Fatalf("%s: %s was recreated: uid %s -> %s", what, path, want, got)
			}
		}
		if got := claimUIDs(t, api, "vault", "woodpecker"); mustJSON(t, got) != mustJSON(t, claims) {
			t.Fatalf("%s: PVCs changed: %v -> %v", what, claims, got)
		}
		requireNoFailedCreate(t, api)
	}

	timed("no-op preview", func() {
		requireChanges(t, "no-op", s.preview("no-op"))
	})

	timed("one value changed in one release", func() {
		s.apps[0].Values["server"] = map[string]any{"logLevel": "debug"}
		s.apply()
		requireChanges(t, "value changed", s.preview("value changed"), "update vault-release")
		s.up("value changed")
		revisions["vault"]++
		requireRevisions("value changed")
		requireSame("value changed")
		if sts := mustJSON(t, api.mustGet("/apis/apps/v1/namespaces/vault/statefulsets/vault")); !strings.Contains(sts, `"name":"VAULT_LOG_LEVEL","value":"debug"`) {
			t.Fatalf("value changed: the StatefulSet lacks VAULT_LOG_LEVEL debug: %s", sts)
		}
	})

	for _, bump := range []struct {
		release, chart, version string
		set                     func(chart map[string]any)
	}{
		{"vault", config.VaultChart, "0.30.1", func(c map[string]any) { s.apps[0].Chart = c }},
		{"woodpecker", config.WoodpeckerChart, "3.2.1", func(c map[string]any) { s.apps[1].Chart = c }},
		{config.StorageAppName, config.StorageChartName, "0.0.34", func(c map[string]any) { s.storage = map[string]any{"chart": c} }},
	} {
		what := fmt.Sprintf("chart bump %s %s", bump.chart, bump.version)
		timed(what, func() {
			bump.set(publishedChart(t, bump.chart, bump.version))
			s.apply()
			requireChanges(t, what, s.preview(what), "update "+bump.release+"-release")
			s.up(what)
			revisions[bump.release]++
			requireRevisions(what)
			requireSame(what)
			if r := releaseRecord(t, api, releases[bump.release], bump.release); !strings.Contains(r, `"version":"`+bump.version+`"`) {
				t.Fatalf("%s: the release record is not of chart %s", what, bump.version)
			}
		})
	}

	timed("value the Vault chart's schema rejects", func() {
		s.apps[0].Values["server"] = map[string]any{"logLevel": "debug", "terminationGracePeriodSeconds": "ten"}
		s.apply()
		code, out := s.milner("up", "--yes")
		if code == 0 {
			t.Fatal("schema: terminationGracePeriodSeconds \"ten\" was accepted")
		}
		if !strings.Contains(out, "values don't meet the specifications of the schema") || !strings.Contains(out, "terminationGracePeriodSeconds") {
			t.Fatalf("schema: want Helm's schema error naming terminationGracePeriodSeconds, exit %d:\n%s", code, out)
		}
		requireRevisions("schema")
		requireSame("schema")
		delete(s.apps[0].Values["server"].(map[string]any), "terminationGracePeriodSeconds")
		s.apply()
		requireChanges(t, "schema reverted", s.preview("schema reverted"))
	})
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// waitForControllers waits until every StatefulSet and Deployment in the
// namespaces has its Pods (created, not running: nothing schedules them)
// and fails on a FailedCreate event (a Pod the API server refused, e.g. by
// its namespace's Pod Security level). It returns the Pods.
func waitForControllers(t *testing.T, api *apiServer, namespaces []string) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		requireNoFailedCreate(t, api)
		var pods []map[string]any
		done := true
		for _, ns := range namespaces {
			for _, kind := range []string{"statefulsets", "deployments"} {
				for _, w := range api.items("/apis/apps/v1/namespaces/" + ns + "/" + kind) {
					spec, _ := w["spec"].(map[string]any)
					status, _ := w["status"].(map[string]any)
					want, _ := spec["replicas"].(float64)
					have, _ := status["replicas"].(float64)
					if have < want {
						done = false
					}
				}
			}
			pods = append(pods, api.items("/api/v1/namespaces/"+ns+"/pods")...)
		}
		if done && len(pods) > 0 {
			return pods
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controllers made %d pods in 3m, not all", len(pods))
		}
		time.Sleep(time.Second)
	}
}

// requireNoFailedCreate fails on any FailedCreate event in the cluster: a
// controller whose Pod or PVC the API server refused.
func requireNoFailedCreate(t *testing.T, api *apiServer) {
	t.Helper()
	var failed []string
	for _, e := range api.items("/api/v1/events?fieldSelector=reason%3DFailedCreate") {
		failed = append(failed, fmt.Sprintf("%s %s/%s: %s", str(e, "involvedObject", "kind"),
			str(e, "involvedObject", "namespace"), str(e, "involvedObject", "name"), str(e, "message")))
	}
	if len(failed) > 0 {
		t.Fatalf("%d FailedCreate events:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
}

// requireClaimsOnDefaultClass checks every PVC in the namespaces (each made
// from a volumeClaimTemplate by the StatefulSet controller) names the
// cluster's default StorageClass, the storage layer's.
func requireClaimsOnDefaultClass(t *testing.T, api *apiServer, namespaces ...string) {
	t.Helper()
	class := defaultClass(t, api)
	n := 0
	for _, ns := range namespaces {
		for _, pvc := range api.items("/api/v1/namespaces/" + ns + "/persistentvolumeclaims") {
			n++
			if got := str(pvc, "spec", "storageClassName"); got != class {
				t.Fatalf("pvc %s/%s: storage class %q, want the default %q", ns, str(pvc, "metadata", "name"), got, class)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no PVC in %v: the StatefulSets' volumeClaimTemplates made none", namespaces)
	}
	t.Logf("%d PVCs on the default StorageClass %s", n, class)
}

// claimUIDs maps each PVC of the namespaces to its uid.
func claimUIDs(t *testing.T, api *apiServer, namespaces ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ns := range namespaces {
		for _, pvc := range api.items("/api/v1/namespaces/" + ns + "/persistentvolumeclaims") {
			out[ns+"/"+str(pvc, "metadata", "name")] = str(pvc, "metadata", "uid")
		}
	}
	return out
}

// requireSecretsThePodsRead checks every Secret a Pod reads (a volume, an
// envFrom, an env secretKeyRef) exists in its namespace with the keys it
// reads. An optional reference may be missing.
func requireSecretsThePodsRead(t *testing.T, api *apiServer, pods []map[string]any) {
	t.Helper()
	type ref struct{ ns, name, key string }
	var refs []ref
	for _, p := range pods {
		ns := str(p, "metadata", "namespace")
		spec, _ := p["spec"].(map[string]any)
		vols, _ := spec["volumes"].([]any)
		for _, v := range vols {
			sec, ok := v.(map[string]any)["secret"].(map[string]any)
			if !ok || sec["optional"] == true {
				continue
			}
			items, _ := sec["items"].([]any)
			if len(items) == 0 {
				refs = append(refs, ref{ns, sec["secretName"].(string), ""})
			}
			for _, it := range items {
				refs = append(refs, ref{ns, sec["secretName"].(string), it.(map[string]any)["key"].(string)})
			}
		}
		containers, _ := spec["containers"].([]any)
		inits, _ := spec["initContainers"].([]any)
		for _, c := range append(containers, inits...) {
			cm := c.(map[string]any)
			envFrom, _ := cm["envFrom"].([]any)
			for _, e := range envFrom {
				if sr, ok := e.(map[string]any)["secretRef"].(map[string]any); ok && sr["optional"] != true {
					refs = append(refs, ref{ns, sr["name"].(string), ""})
				}
			}
			env, _ := cm["env"].([]any)
			for _, e := range env {
				vf, _ := e.(map[string]any)["valueFrom"].(map[string]any)
				if sk, ok := vf["secretKeyRef"].(map[string]any); ok && sk["optional"] != true {
					refs = append(refs, ref{ns, sk["name"].(string), sk["key"].(string)})
				}
			}
		}
	}
	if len(refs) == 0 {
		t.Fatal("no pod reads a Secret: the profiles' Secrets are not wired into the charts")
	}
	seen := map[string]bool{}
	for _, r := range refs {
		id := r.ns + "/" + r.name + ":" + r.key
		if seen[id] {
			continue
		}
		seen[id] = true
		_, data := secretData(t, api, r.ns, r.name)
		if _, ok := data[r.key]; r.key != "" && !ok {
			t.Fatalf("secret %s/%s lacks key %s, which a pod reads", r.ns, r.name, r.key)
		}
		t.Logf("pods read secret %s/%s %s: present", r.ns, r.name, r.key)
	}
}
