//go:build integration

package kubeapi

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/testpki"
)

// forgeURL is a forge on loopback that answers, as the forge-answers rule
// asks of Woodpecker's forge before any up (internal/pipeline/forge.go);
// one per test process.
var forgeURL = sync.OnceValue(func() string {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })).URL
})

// Apps of the scenario that carry Milner's hardened profiles, on the test
// chart: what the profiles create besides the release (the Secrets the
// charts read by name) is real, and the chart reads their names as the real
// charts do.
func woodpeckerApp() app {
	a := testApp("ci")
	a.Woodpecker = map[string]any{
		"host":   "https://ci.example.org",
		"admins": []any{"alice"},
		"forge":  map[string]any{"kind": "forgejo", "url": forgeURL()},
	}
	return a
}

func vaultApp() app {
	a := testApp("vault")
	a.PodSecurity = "baseline"
	a.Vault = map[string]any{"replicas": 1, "dataSize": "1Gi", "auditSize": "1Gi"}
	return a
}

// workloadsConfig is milner:workloads of the scenario.
func workloadsConfig() map[string]any {
	return map[string]any{
		"name":  "evolved-npcs",
		"quota": map[string]any{"requests.cpu": "4", "requests.memory": "8Gi", "pods": "40"},
		"max":   map[string]any{"cpu": "2", "memory": "4Gi"},
	}
}

// vaultHost is the name the real-kubelet scenario exposes Vault at
// (milner:apps[].expose.host).
const vaultHost = "vault.milner.internal"

// vaultCertificate is Vault's listener certificate, its key and the CA
// that issued it, PEM, covering every name config.VaultTLSNames asks for
// (Load refuses anything less) and vaultHost, as `milner secrets
// generate` issues it for an exposed Vault.
func vaultCertificate() testpki.Bundle {
	return testpki.Valid(append(config.VaultTLSNames("vault", "vault"), vaultHost)...)
}

// requireStorage checks the storage layer as the API server holds it: the
// provisioner's namespace enforces privileged, the stand-in chart got the
// values stacks/storage.go sets (its own class not created, the node path
// and provisioner name passed), its hostPath pod is admitted there and
// would be refused by a baseline or restricted namespace, and the
// program's class is the one default.
func requireStorage(t *testing.T, api *apiServer) {
	t.Helper()
	ns := config.DefaultStorageNamespace
	requirePodSecurity(t, api, ns, "privileged")
	deployments := api.items("/apis/apps/v1/namespaces/" + ns + "/deployments")
	if len(deployments) != 1 {
		t.Fatalf("storage: want the stand-in chart's one Deployment in %s, got %d", ns, len(deployments))
	}
	d := deployments[0]
	if got := mustJSON(t, d); !strings.Contains(got, `"path":"`+config.DefaultStoragePath+`"`) ||
		!strings.Contains(got, `"value":"`+stacks.LocalPathProvisioner+`"`) {
		t.Fatalf("storage: the Deployment lacks the node path %s or the provisioner name %s: %s",
			config.DefaultStoragePath, stacks.LocalPathProvisioner, got)
	}
	tmpl, _ := d["spec"].(map[string]any)["template"].(map[string]any)
	api.defaultServiceAccount(ns)
	if err := api.admitPod(ns, tmpl); err != nil {
		t.Fatalf("storage: the provisioner's pod in its privileged namespace: %v", err)
	}
	for _, level := range []string{"baseline", "restricted"} {
		probe := "probe-" + level
		if _, err := api.get("/api/v1/namespaces/" + probe); err != nil {
			api.namespace(probe, map[string]any{"pod-security.kubernetes.io/enforce": level})
		}
		err := api.admitPod(probe, tmpl)
		if err == nil || !strings.Contains(err.Error(), `violates PodSecurity "`+level) || !strings.Contains(err.Error(), "hostPath") {
			t.Fatalf("storage: the provisioner's pod in a %s namespace: want a PodSecurity refusal of its hostPath volume, got %v", level, err)
		}
	}
	if got := defaultClass(t, api); got != config.DefaultStorageClass {
		t.Fatalf("storage: want the default StorageClass %s, got %s", config.DefaultStorageClass, got)
	}
	sc := api.mustGet("/apis/storage.k8s.io/v1/storageclasses/" + config.DefaultStorageClass)
	if str(sc, "provisioner") != stacks.LocalPathProvisioner || str(sc, "reclaimPolicy") != "Retain" ||
		str(sc, "volumeBindingMode") != "WaitForFirstConsumer" {
		t.Fatalf("storage: class %s: %s", config.DefaultStorageClass, mustJSON(t, sc))
	}
}

// requirePodSecurity fails unless namespace ns enforces level.
func requirePodSecurity(t *testing.T, api *apiServer, ns, level string) {
	t.Helper()
	labels, _ := api.mustGet("/api/v1/namespaces/" + ns)["metadata"].(map[string]any)["labels"].(map[string]any)
	if labels["pod-security.kubernetes.io/enforce"] != level {
		t.Fatalf("namespace %s: want PodSecurity enforce=%s, labels %v", ns, level, labels)
	}
}

// requireWorkloads checks milner:workloads' reservation on the API server.
func requireWorkloads(t *testing.T, api *apiServer) {
	t.Helper()
	ns := "evolved-npcs"
	requirePodSecurity(t, api, ns, "baseline")
	quota := api.mustGet("/api/v1/namespaces/" + ns + "/resourcequotas/" + ns + "-quota")
	hard, _ := quota["spec"].(map[string]any)["hard"].(map[string]any)
	if hard["requests.cpu"] != "4" || hard["requests.memory"] != "8Gi" || hard["pods"] != "40" {
		t.Fatalf("workloads: quota hard %v", hard)
	}
	lr := api.mustGet("/api/v1/namespaces/" + ns + "/limitranges/" + ns + "-limits")
	limits, _ := lr["spec"].(map[string]any)["limits"].([]any)
	if len(limits) != 1 {
		t.Fatalf("workloads: limit range %s", mustJSON(t, lr))
	}
	item, _ := limits[0].(map[string]any)
	if str(item, "type") != "Container" || mustJSON(t, item["max"]) != `{"cpu":"2","memory":"4Gi"}` ||
		mustJSON(t, item["defaultRequest"]) != `{"cpu":"100m","memory":"128Mi"}` ||
		mustJSON(t, item["default"]) != `{"cpu":"1","memory":"1Gi"}` {
		t.Fatalf("workloads: limit range item %s", mustJSON(t, item))
	}
	pc := api.mustGet("/apis/scheduling.k8s.io/v1/priorityclasses/" + ns)
	if v, _ := pc["value"].(float64); v != config.DefaultPriority || str(pc, "preemptionPolicy") != "Never" {
		t.Fatalf("workloads: priority class %s", mustJSON(t, pc))
	}
}

// secretData is a Secret's data, decoded.
func secretData(t *testing.T, api *apiServer, ns, name string) (typ string, data map[string]string) {
	t.Helper()
	s := api.mustGet("/api/v1/namespaces/" + ns + "/secrets/" + name)
	data = map[string]string{}
	raw, _ := s["data"].(map[string]any)
	for k, v := range raw {
		b, err := base64.StdEncoding.DecodeString(v.(string))
		if err != nil {
			t.Fatalf("secret %s/%s: %s: %v", ns, name, k, err)
		}
		data[k] = string(b)
	}
	return str(s, "type"), data
}

// podSpec is the pod spec of the Deployment ns/name.
func podSpec(t *testing.T, api *apiServer, ns, name string) map[string]any {
	t.Helper()
	d := api.mustGet("/apis/apps/v1/namespaces/" + ns + "/deployments/" + name)
	tmpl, _ := d["spec"].(map[string]any)["template"].(map[string]any)
	spec, _ := tmpl["spec"].(map[string]any)
	return spec
}

// requireWoodpeckerSecrets checks the Secrets of the Woodpecker profile: the
// server's holds the agent secret and the forge's OAuth client, the
// agents' the agent secret alone; the chart reads the server's by name
// (envFrom), and no secret value is in the Helm release record.
func requireWoodpeckerSecrets(t *testing.T, api *apiServer) {
	t.Helper()
	typ, server := secretData(t, api, "ci", "ci-"+stacks.WoodpeckerServerSecret)
	want := map[string]string{"WOODPECKER_AGENT_SECRET": agentSecret,
		"WOODPECKER_FORGEJO_CLIENT": forgeClient, "WOODPECKER_FORGEJO_SECRET": forgeSecret}
	if typ != "Opaque" || mustJSON(t, server) != mustJSON(t, want) {
		t.Fatalf("woodpecker: server Secret %s %v, want Opaque %v", typ, server, want)
	}
	_, agent := secretData(t, api, "ci", "ci-"+stacks.WoodpeckerAgentSecret)
	if mustJSON(t, agent) != mustJSON(t, map[string]string{"WOODPECKER_AGENT_SECRET": agentSecret}) {
		t.Fatalf("woodpecker: agent Secret %v", agent)
	}
	containers, _ := podSpec(t, api, "ci", "ci")["containers"].([]any)
	envFrom := mustJSON(t, containers[0].(map[string]any)["envFrom"])
	if envFrom != `[{"secretRef":{"name":"ci-server-env"}}]` {
		t.Fatalf("woodpecker: the chart's envFrom %s, want the server Secret ci-server-env", envFrom)
	}
	record := releaseRecord(t, api, "ci", "ci")
	for _, v := range []string{agentSecret, forgeClient, forgeSecret} {
		if strings.Contains(record, v) {
			t.Fatalf("woodpecker: a secret value is in the Helm release record")
		}
	}
	if !strings.Contains(record, `"extraSecretNamesForEnvFrom":["ci-server-env"]`) {
		t.Fatalf("woodpecker: the release record lacks the profile's values")
	}
}

// requireVaultTLS checks the Vault profile's TLS Secret (kubernetes.io/tls,
// the operator's certificate) and that the chart mounts it by name.
func requireVaultTLS(t *testing.T, api *apiServer, tls testpki.Bundle) {
	t.Helper()
	typ, data := secretData(t, api, "vault", "vault-"+stacks.VaultTLSSuffix)
	if typ != "kubernetes.io/tls" || data["tls.crt"] != tls.Cert || data["tls.key"] != tls.Key || data["ca.crt"] != tls.CA {
		t.Fatalf("vault: TLS Secret type %s, keys %v", typ, slices.Sorted(func(yield func(string) bool) {
			for k := range data {
				if !yield(k) {
					return
				}
			}
		}))
	}
	volumes := mustJSON(t, podSpec(t, api, "vault", "vault")["volumes"])
	if !strings.Contains(volumes, `"name":"tls"`) || !strings.Contains(volumes, `"secretName":"vault-tls"`) {
		t.Fatalf("vault: the chart's volumes %s lack the TLS Secret vault-tls", volumes)
	}
	if strings.Contains(releaseRecord(t, api, "vault", "vault"), "PRIVATE KEY") {
		t.Fatal("vault: the TLS key is in the Helm release record")
	}
}

// releaseRecord is the latest revision of a Helm release as Helm stores it
// (helm.sh/helm/v3 pkg/storage/driver/util.go encodeRelease: JSON, gzip,
// base64, in the Secret's "release" key), decoded to its JSON.
func releaseRecord(t *testing.T, api *apiServer, ns, name string) string {
	t.Helper()
	s := (&appsScenario{t: t, api: api}).release(ns, name)
	if len(s.secrets) == 0 {
		t.Fatalf("release %s/%s: no revision", ns, name)
	}
	_, data := secretData(t, api, ns, s.secrets[len(s.secrets)-1])
	gz, err := base64.StdEncoding.DecodeString(data["release"])
	if err != nil {
		t.Fatalf("release %s/%s: %v", ns, name, err)
	}
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatalf("release %s/%s: %v", ns, name, err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("release %s/%s: %v", ns, name, err)
	}
	return string(b)
}
