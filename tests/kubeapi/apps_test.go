//go:build integration

package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/harness"
	"github.com/milner/milner/tests/testpki"
)

const (
	// stackName and passphrase are the scenario stack's.
	stackName  = "kubeapi"
	passphrase = "milner-kubeapi"
)

// Paths of the project's test charts, relative to a scenario's project
// directory, where charts/ is a copy of tests/charts (a relative chart.path is
// read from the project directory, as a user's vendored chart would be).
const (
	testChart    = "charts/milner-test"
	storageChart = "charts/milner-storage-test"
)

// Secrets the scenario stack holds, set with `pulumi config set --secret`
// as the README tells an operator.
const (
	agentSecret = "agent-s3cret-kubeapi"
	forgeClient = "forge-client-kubeapi"
	forgeSecret = "forge-s3cret-kubeapi"
)

// app is one entry of milner:apps in a scenario.
type app struct {
	Name           string         `json:"name"`
	ReleaseName    string         `json:"releaseName,omitempty"`
	Namespace      string         `json:"namespace,omitempty"`
	Chart          map[string]any `json:"chart"`
	Values         map[string]any `json:"values,omitempty"`
	PodSecurity    string         `json:"podSecurity,omitempty"`
	RetainOnDelete bool           `json:"retainOnDelete,omitempty"`
	PreviousNames  []string       `json:"previousNames,omitempty"`
	Vault          map[string]any `json:"vault,omitempty"`
	Woodpecker     map[string]any `json:"woodpecker,omitempty"`
	Expose         map[string]any `json:"expose,omitempty"`
}

// testApp is an app of the test chart in its own namespace, enforcing the
// restricted Pod Security Standard.
func testApp(name string) app {
	return app{
		Name: name, ReleaseName: name, Namespace: name, PodSecurity: "restricted",
		Chart:  map[string]any{"path": testChart},
		Values: map[string]any{"message": "hello " + name},
	}
}

// appsScenario is a stack that starts at the apps layer against the test API
// server and runs Milner's program, stacks.Program.
type appsScenario struct {
	t         *testing.T
	api       *apiServer
	stack     *engine.Stack
	dir       string // the project directory
	backend   string // the backend URL
	apps      []app
	workloads map[string]any
	file      string // the stack file
	// vaultTLS is the Vault profile's TLS certificate, key and CA, as the
	// stack's secrets hold them.
	vaultTLS testpki.Bundle
	// storage is milner:storage (nil: the stand-in chart, storageChart).
	storage map[string]any
	// mirrors is milner:chartMirrors (nil: none).
	mirrors map[string]string
	// loadBalancer is milner:loadBalancer (nil: none).
	loadBalancer map[string]any
	// waitForApps is milner:waitForApps: false but where a kubelet runs
	// the pods (TestAppsRunOnARealKubelet).
	waitForApps bool
}

// newAppsScenario makes a project directory as a user's checkout would be
// (the repository's Pulumi.yaml, its test charts under charts/), writes a
// stack file holding the API server's kubeconfig and the Vault and
// Woodpecker profiles' secrets, set the way the README tells a user
// (`pulumi config set --secret` with the pinned CLI), and opens the stack
// on its own file backend with the real program.
func newAppsScenario(t *testing.T, api *apiServer, apps ...app) *appsScenario {
	t.Helper()
	requireTools(t, "pulumi", "pulumi-resource-kubernetes")
	dir := t.TempDir()
	project, err := os.ReadFile(filepath.Join(repo, "Pulumi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), project, 0o600); err != nil {
		t.Fatal(err)
	}
	// A copy, not a link: a chart path that resolves outside the project
	// is refused (config's hardening rule), as a user's link would be.
	copyDir(t, filepath.Join(repo, "tests", "charts"), filepath.Join(dir, "charts"))
	// The repository's pinned tools, where the milner command looks.
	if err := os.Symlink(filepath.Join(repo, ".tools"), filepath.Join(dir, ".tools")); err != nil {
		t.Fatal(err)
	}
	userState := filepath.Join(dir, "user-state")
	backend := "file://" + userState
	if err := os.MkdirAll(userState, 0o700); err != nil {
		t.Fatal(err)
	}
	pulumiCLI := func(args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(toolsBin, "pulumi"), append([]string{"--non-interactive"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PULUMI_BACKEND_URL="+backend,
			"PULUMI_CONFIG_PASSPHRASE="+passphrase, "PULUMI_SKIP_UPDATE_CHECK=true")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("pulumi %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	pulumiCLI("stack", "init", stackName)
	tls := vaultCertificate()
	for k, v := range map[string]string{
		"kubeconfig": api.Kubeconfig, "woodpeckerAgentSecret": agentSecret,
		"woodpeckerForgeClient": forgeClient, "woodpeckerForgeSecret": forgeSecret,
		"vaultTlsCert": tls.Cert, "vaultTlsKey": tls.Key, "vaultTlsCa": tls.CA,
	} {
		// "--" ends the flags: a PEM value starts with "-".
		pulumiCLI("config", "set", "--secret", "--stack", stackName, "milner:"+k, "--", v)
	}

	s := &appsScenario{t: t, api: api, dir: dir, backend: backend, apps: apps, workloads: workloadsConfig(),
		file: filepath.Join(dir, "Pulumi."+stackName+".yaml"), vaultTLS: tls}
	s.apply()
	// One workflow: the engine runs Milner's program on the project, stack
	// file and backend the CLI just used.
	st, err := engine.Open(context.Background(), engine.Options{
		Stack:      stackName,
		Dir:        dir,
		Tools:      toolsBin,
		Backend:    backend,
		Passphrase: passphrase,
		Program:    stacks.Program,
		Progress:   harness.LogWriter(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.stack = st
	return s
}

// config is the stack's plain config: a cluster that starts at the apps
// layer and does not wait for pods (unless s.waitForApps), the storage layer on
// the stand-in chart, s.workloads and s.apps.
func (s *appsScenario) config() map[string]string {
	j := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			s.t.Fatal(err)
		}
		return string(b)
	}
	cfg := map[string]string{
		"milner:cluster":     j(map[string]any{"name": "kubeapi-it"}),
		"milner:startAt":     "apps",
		"milner:waitForApps": fmt.Sprint(s.waitForApps),
		"milner:storage":     j(map[string]any{"chart": map[string]any{"path": storageChart}}),
		"milner:apps":        j(s.apps),
	}
	if s.storage != nil {
		cfg["milner:storage"] = j(s.storage)
	}
	if s.mirrors != nil {
		cfg["milner:chartMirrors"] = j(s.mirrors)
	}
	if s.loadBalancer != nil {
		cfg["milner:loadBalancer"] = j(s.loadBalancer)
	}
	if s.workloads != nil {
		cfg["milner:workloads"] = j(s.workloads)
	}
	return cfg
}

// apply writes the plain config into the stack file, keeping its secrets
// and passphrase salt as the CLI wrote them.
func (s *appsScenario) apply() {
	s.t.Helper()
	b, err := os.ReadFile(s.file)
	if err != nil {
		s.t.Fatal(err)
	}
	doc := map[string]any{}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		s.t.Fatal(err)
	}
	cfg, _ := doc["config"].(map[string]any)
	if cfg == nil {
		cfg = map[string]any{}
	}
	delete(cfg, "milner:workloads")
	delete(cfg, "milner:chartMirrors")
	for k, v := range s.config() {
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v
		}
		cfg[k] = val
	}
	doc["config"] = cfg
	if b, err = yaml.Marshal(doc); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(s.file, b, 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// preview previews and fails the test if the preview fails.
func (s *appsScenario) preview(what string) *engine.Result {
	s.t.Helper()
	start := time.Now()
	r, _, err := s.stack.Preview(context.Background(), engine.PlanOptions{})
	if err != nil {
		s.t.Fatalf("%s: preview: %v", what, err)
	}
	s.t.Logf("%s: preview %v in %s", what, r.Summary, time.Since(start).Round(time.Millisecond))
	return r
}

// up applies the config with `milner up --yes`, as an operator would
// (preview, gate, then exactly the previewed plan), fails the test unless
// it exits 0, and returns what it printed.
func (s *appsScenario) up(what string) string {
	s.t.Helper()
	code, out := s.milner("up", "--yes")
	if code != 0 {
		s.t.Fatalf("%s: milner up: exit %d:\n%s", what, code, out)
	}
	return out
}

// release is a Helm release as Helm itself records it in the cluster: one
// Secret per revision (helm.sh/helm/v3 pkg/storage/driver/secrets.go:
// type helm.sh/release.v1, labels owner=helm, name=<release>,
// version=<revision>, status=<status>).
type release struct {
	revision int
	status   string
	// secrets are the revision Secrets' names, oldest first.
	secrets []string
}

// release reads release name in namespace ns from its Helm storage.
func (s *appsScenario) release(ns, name string) release {
	s.t.Helper()
	var r release
	items := s.api.items("/api/v1/namespaces/" + ns + "/secrets?labelSelector=owner%3Dhelm%2Cname%3D" + name)
	slices.SortFunc(items, func(a, b map[string]any) int {
		return revisionOf(s.t, a) - revisionOf(s.t, b)
	})
	for _, it := range items {
		r.secrets = append(r.secrets, str(it, "metadata", "name"))
		if rev := revisionOf(s.t, it); rev > r.revision {
			r.revision = rev
			labels, _ := it["metadata"].(map[string]any)["labels"].(map[string]any)
			r.status, _ = labels["status"].(string)
		}
	}
	return r
}

func revisionOf(t *testing.T, secret map[string]any) int {
	t.Helper()
	labels, _ := secret["metadata"].(map[string]any)["labels"].(map[string]any)
	v, _ := labels["version"].(string)
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("helm release secret %s: version label %q: %v", str(secret, "metadata", "name"), v, err)
	}
	return n
}

// uid is an object's metadata.uid: a recreated object has a new one.
func (s *appsScenario) uid(path string) string {
	s.t.Helper()
	return str(s.api.mustGet(path), "metadata", "uid")
}

// requireChanges fails unless the preview changes exactly want ("op name"
// of each changed step, sorted).
func requireChanges(t *testing.T, what string, r *engine.Result, want ...string) {
	t.Helper()
	var got []string
	for _, st := range r.Changes() {
		got = append(got, string(st.Op)+" "+st.Name())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: want changes %q, got %q:%s", what, want, got, steps(r.Changes()))
	}
}

// TestAppsOnRealAPI drives Milner's program (stacks.Program) through the
// real engine, the real Kubernetes provider and Helm against a real
// kube-apiserver, on a stack that starts at the apps layer, one scenario
// after another on the same stack, as an operator would.
//
// `make integration` also runs `tests/kubeapi` (build tag `integration`): etcd
// and kube-apiserver on loopback, with certificates, an admin client
// certificate and service-account keys generated by the test, RBAC and
// kube-apiserver's default admission plugins (PodSecurity, ServiceAccount,
// DefaultStorageClass, LimitRanger, ResourceQuota, Priority, ...). The tools are
// built from Go modules like the others (`scripts/tools.sh kubeapi kubernetes`,
// `make tools-kubeapi`): kube-apiserver from `k8s.io/kubernetes` v1.36.3 (its
// staging modules replaced by `k8s.io/*` v0.36.3), etcd from
// `go.etcd.io/etcd/server/v3` v3.6.16 (its own `etcdmain`), and the Kubernetes
// provider plugin from `pulumi-kubernetes/provider/v4`
// v4.0.0-20260115033456-f47bc2d6f199 (with `sdk/v4` v4.25.0, tagged the next day,
// standing in for its `../sdk` replace), stamped with the version the program's
// `sdk/v4` v4.33.0 asks the engine for (4.33.0).
//
// The scenarios run Milner's own program (`stacks.Program`) and the
// `milner` command, on a project directory made like a checkout (the
// repository's `Pulumi.yaml`, `charts/` linking `tests/charts`) and a stack
// with `startAt: apps`, the API server's kubeconfig and the Vault and
// Woodpecker secrets set with `pulumi config set --secret`, and the test-only
// `waitForApps: false` (no kubelet runs). No chart repository is reachable,
// so the charts are the tests' own, given by `chart.path`:
// `tests/charts/milner-storage-test` stands in for local-path-provisioner
// (it takes exactly the values `stacks/storage.go` sets and renders a pod
// mounting the node path from the host), `tests/charts/milner-test` is every
// app's (a Deployment whose pod meets the restricted Pod Security Standard, a
// PVC, a strict `values.schema.json`; it also takes the profiles' top-level
// keys and reads `server.extraSecretNamesForEnvFrom`, `server.volumes` and
// `server.volumeMounts` as the real charts do). Four apps (`alpha`, `beta`,
// `ci` with the Woodpecker profile, `vault` with the Vault profile) and
// `milner:workloads`.
//
// Verified on the real API server (`TestAppsOnRealAPI`, one stack, scenario
// after scenario; previews on `internal/engine`, every apply with `milner up
// --yes`; asserted through the API server's REST API):
//   - install from empty: every object accepted (26 resources); the storage
//     namespace enforces `privileged` and admits the provisioner's hostPath pod,
//     which a `baseline` or `restricted` namespace refuses; `local-path` is the
//     one default StorageClass (the chart's own class is not created); every
//     app's pod template is admitted as a pod (dry run) by its namespace's
//     PodSecurity level; every app PVC gets `local-path`; the workloads'
//     namespace, ResourceQuota, LimitRange and PriorityClass as configured;
//     Woodpecker's server Secret (agent secret, forge client id and secret) and
//     agent Secret (agent secret only), the chart reading the server's through
//     `envFrom`, and no secret value in the Helm release record; Vault's
//     `kubernetes.io/tls` Secret with the operator's certificate, mounted by name;
//   - a no-op preview plans nothing and `milner up` says "no changes";
//   - one chart value changed: exactly that release updated in place (revision
//     2, same Deployment uid), every other release at revision 1;
//   - a value `values.schema.json` rejects: Helm's error names the path
//     (`at '/replicas': maximum: got 99, want 5`), `milner up` exits 1 and the
//     release stays at its revision. The *preview* passes: Helm validates values
//     only when it installs or upgrades;
//   - an app renamed with `previousNames`: no create, no delete;
//   - an app removed: `milner up` refuses the release's delete (exit 5, "nothing
//     was applied"; release and PVC untouched); after `retainOnDelete: true`
//     (which `milner up` records in state, see [changelog.md](changelog.md)) `milner up` removes it
//     from state only: release, PVC and namespace stay;
//   - a chart vendored in the project directory (`chart.path: vendor/web`): a
//     template edited without a version bump plans nothing; with `Chart.yaml`'s
//     version bumped, exactly that release is updated (revision 2, same
//     Deployment uid, the edit on the Deployment).
//
// `TestAPIServerAdmission` checks the harness itself: PodSecurity refuses a
// privileged pod in a `restricted` namespace, DefaultStorageClass names the
// default class (after its informer has seen the class). Warm (four passing runs on
// the shared two-core machine), the package took 43 to 55 s (the scenarios 38
// to 50 s, much of it building `milner`; each preview or `milner up` about
// 1 s, the install 3 s), 56 to 73 s with its compile;
// `scripts/tools.sh kubeapi kubernetes` skips all three builds when their
// stamps match (0.1 s).
//
// Not verifiable without kubelets, a scheduler and a controller manager: pods
// starting, readiness and Helm's `atomic` rollback (the releases here do not
// wait), PVCs binding (no provisioner runs: they stay Pending), the
// ResourceQuota's status, the rollouts a value change triggers, Vault
// initialising and unsealing, Woodpecker reaching its forge; and the real
// Vault, Woodpecker and local-path-provisioner charts (not reachable here;
// their values are checked under mocks, see the apps section).
func TestAppsOnRealAPI(t *testing.T) {
	api := startAPIServer(t)
	s := newAppsScenario(t, api, testApp("alpha"), testApp("beta"), woodpeckerApp(), vaultApp())

	// Install from empty: every object accepted by the API server.
	if out := s.up("install"); !strings.Contains(out, "created") {
		t.Fatalf("install: want creates:\n%s", out)
	}
	requireStorage(t, api)
	requireWorkloads(t, api)
	requireWoodpeckerSecrets(t, api)
	requireVaultTLS(t, api, s.vaultTLS)
	for _, a := range s.apps {
		name := a.Name
		requirePodSecurity(t, api, name, a.PodSecurity)
		if rel := s.release(name, name); rel.revision != 1 || rel.status != "deployed" {
			t.Fatalf("release %s: want revision 1 deployed, got %+v", name, rel)
		}
		// Every pod template the chart rendered passes the namespace's
		// enforced level, as the pod it would become.
		api.defaultServiceAccount(name)
		deployments := api.items("/apis/apps/v1/namespaces/" + name + "/deployments")
		if len(deployments) != 1 {
			t.Fatalf("namespace %s: want the chart's one Deployment, got %d", name, len(deployments))
		}
		for _, d := range deployments {
			tmpl, _ := d["spec"].(map[string]any)["template"].(map[string]any)
			if err := api.admitPod(name, tmpl); err != nil {
				t.Fatalf("deployment %s/%s: %v", name, str(d, "metadata", "name"), err)
			}
		}
		// The chart's PVC names no class: admission gives it the default,
		// the storage layer's.
		pvc := api.mustGet("/api/v1/namespaces/" + name + "/persistentvolumeclaims/" + name + "-data")
		if got := str(pvc, "spec", "storageClassName"); got != config.DefaultStorageClass {
			t.Fatalf("pvc %s/%s-data: want the default StorageClass %q, got %q", name, name, config.DefaultStorageClass, got)
		}
	}
	alphaDeploy := s.uid("/apis/apps/v1/namespaces/alpha/deployments/alpha")
	alphaPVC := s.uid("/api/v1/namespaces/alpha/persistentvolumeclaims/alpha-data")
	betaPVC := s.uid("/api/v1/namespaces/beta/persistentvolumeclaims/beta-data")

	// A no-op preview plans nothing; `milner up` says so and applies nothing.
	requireChanges(t, "no-op", s.preview("no-op"))
	if out := s.up("no-op"); !strings.Contains(out, "stack "+stackName+": no changes") {
		t.Fatalf("no-op: milner up did not report no changes:\n%s", out)
	}

	// One chart value changed: exactly that release, updated in place.
	s.apps[0].Values["message"] = "changed"
	s.apply()
	requireChanges(t, "value changed", s.preview("value changed"), "update alpha-release")
	s.up("value changed")
	if rel := s.release("alpha", "alpha"); rel.revision != 2 || rel.status != "deployed" {
		t.Fatalf("release alpha: want revision 2 deployed, got %+v", rel)
	}
	for _, other := range [][2]string{{"beta", "beta"}, {"ci", "ci"}, {"vault", "vault"},
		{config.DefaultStorageNamespace, config.StorageAppName}} {
		if rel := s.release(other[0], other[1]); rel.revision != 1 {
			t.Fatalf("release %s: want revision 1 (untouched), got %+v", other[1], rel)
		}
	}
	if got := s.uid("/apis/apps/v1/namespaces/alpha/deployments/alpha"); got != alphaDeploy {
		t.Fatalf("deployment alpha was recreated: uid %s -> %s", alphaDeploy, got)
	}
	d := api.mustGet("/apis/apps/v1/namespaces/alpha/deployments/alpha")
	if !strings.Contains(mustJSON(t, d), `"value":"changed"`) {
		t.Fatalf("deployment alpha: the changed value did not reach it: %s", mustJSON(t, d))
	}

	// A value the chart's values.schema.json rejects: a clear error, and
	// nothing changes.
	s.apps[1].Values["replicas"] = 99
	s.apply()
	// Helm validates values when it installs or upgrades: the preview
	// passes, the update fails before the release changes.
	requireChanges(t, "schema", s.preview("schema"), "update beta-release")
	code, out := s.milner("up", "--yes")
	if code == 0 {
		t.Fatal("schema: replicas 99 (maximum 5) was accepted")
	}
	if !strings.Contains(out, "values don't meet the specifications of the schema") || !strings.Contains(out, "replicas") {
		t.Fatalf("schema: want Helm's schema error naming replicas, exit %d:\n%s", code, out)
	}
	if rel := s.release("beta", "beta"); rel.revision != 1 || rel.status != "deployed" {
		t.Fatalf("schema: release beta changed: %+v", rel)
	}
	delete(s.apps[1].Values, "replicas")
	s.apply()
	requireChanges(t, "schema reverted", s.preview("schema reverted"))

	// An app renamed with previousNames: no delete, no create.
	s.apps[0].Name, s.apps[0].PreviousNames = "alpha-renamed", []string{"alpha"}
	s.apply()
	r := s.preview("rename")
	for _, st := range r.Changes() {
		if st.Op == "create" || st.Op == "delete" || st.Op == "replace" || st.Op == "create-replacement" {
			t.Fatalf("rename: want no create or delete, got%s", steps(r.Changes()))
		}
	}
	s.up("rename")
	if rel := s.release("alpha", "alpha"); rel.revision != 2 {
		t.Fatalf("rename: release alpha: want revision 2 (untouched), got %+v", rel)
	}
	requireChanges(t, "after rename", s.preview("after rename"))

	// An app removed from config: `milner up` refuses the release's delete
	// at its gate, nothing is applied, its PVC stays.
	s.remove("beta")
	code, out = s.milner("up", "--yes")
	if code == 0 || !strings.Contains(out, "beta-release") || !strings.Contains(out, "nothing was applied") {
		t.Fatalf("remove: want milner up to refuse deleting beta-release and apply nothing, exit %d:\n%s", code, out)
	}
	if rel := s.release("beta", "beta"); rel.revision != 1 || rel.status != "deployed" {
		t.Fatalf("remove: release beta changed: %+v", rel)
	}
	if got := s.uid("/api/v1/namespaces/beta/persistentvolumeclaims/beta-data"); got != betaPVC {
		t.Fatalf("remove: pvc beta-data recreated: %s -> %s", betaPVC, got)
	}

	// Retained as configured: with retainOnDelete the delete only leaves
	// state; the release and its PVC stay in the cluster.
	beta := testApp("beta")
	beta.RetainOnDelete = true
	s.apps = append(s.apps, beta)
	s.apply()
	// Turning retainOnDelete on changes nothing in the cluster; milner up
	// applies it all the same, so that state records it.
	if out := s.up("retain"); !strings.Contains(out, "beta-release (kubernetes:helm.sh/v3:Release): retainOnDelete false -> true") {
		t.Fatalf("retain: milner up did not record retainOnDelete:\n%s", out)
	}
	s.remove("beta")
	r = s.preview("remove retained")
	if refusals := gate.Check(gate.NewReport(gate.StepsFromEvents(r.Events), "kubeapi-it"), nil, nil); len(refusals) > 0 {
		t.Fatalf("remove retained: want no refusal, got %v", refusals)
	}
	if code, out := s.milner("up", "--yes"); code != 0 {
		t.Fatalf("remove retained: milner up exit %d:\n%s", code, out)
	}
	if rel := s.release("beta", "beta"); rel.revision != 1 || rel.status != "deployed" {
		t.Fatalf("remove retained: release beta: want revision 1 deployed, left in the cluster, got %+v", rel)
	}
	if got := s.uid("/api/v1/namespaces/beta/persistentvolumeclaims/beta-data"); got != betaPVC {
		t.Fatalf("remove retained: pvc beta-data recreated: %s -> %s", betaPVC, got)
	}
	if got := s.uid("/api/v1/namespaces/alpha/persistentvolumeclaims/alpha-data"); got != alphaPVC {
		t.Fatalf("pvc alpha-data recreated: %s -> %s", alphaPVC, got)
	}

	// A chart vendored in the project (chart.path): a template change alone
	// is not planned (the provider diffs the release's inputs, and a local
	// chart's version input is its Chart.yaml's); bumping the chart's
	// version plans it, and it is an in-place upgrade.
	vendored := filepath.Join(s.dir, "vendor", "web")
	copyDir(t, filepath.Join(repo, "tests", "charts", "milner-test"), vendored)
	web := testApp("web")
	web.Chart = map[string]any{"path": "vendor/web"}
	s.apps = append(s.apps, web)
	s.apply()
	s.up("vendored chart")
	webDeploy := s.uid("/apis/apps/v1/namespaces/web/deployments/web")
	edit := func(file, old, new string) {
		t.Helper()
		path := filepath.Join(vendored, file)
		b := readFile(t, path)
		if !strings.Contains(string(b), old) {
			t.Fatalf("%s lacks %q", path, old)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	edit("templates/deployment.yaml", "app.kubernetes.io/instance: {{ .Release.Name }}\nspec:",
		"app.kubernetes.io/instance: {{ .Release.Name }}\n    vendored: edited\nspec:")
	requireChanges(t, "template edited", s.preview("template edited"))
	edit("Chart.yaml", "version: 0.1.0", "version: 0.1.1")
	requireChanges(t, "chart version bumped", s.preview("chart version bumped"), "update web-release")
	s.up("chart version bumped")
	d = api.mustGet("/apis/apps/v1/namespaces/web/deployments/web")
	if labels, _ := d["metadata"].(map[string]any)["labels"].(map[string]any); labels["vendored"] != "edited" {
		t.Fatalf("vendored chart: the edited template did not reach the Deployment: labels %v", labels)
	}
	if rel := s.release("web", "web"); rel.revision != 2 || rel.status != "deployed" {
		t.Fatalf("vendored chart: release web: want revision 2 deployed, got %+v", rel)
	}
	if got := s.uid("/apis/apps/v1/namespaces/web/deployments/web"); got != webDeploy {
		t.Fatalf("vendored chart: deployment web recreated: %s -> %s", webDeploy, got)
	}
}

// copyDir copies the regular files of the tree src into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// milner runs the milner command, built once per test process, on
// the scenario's stack with its backend and passphrase in Pulumi's variables,
// logs what it printed and returns its exit code and output.
func (s *appsScenario) milner(args ...string) (int, string) {
	s.t.Helper()
	bin := harness.Milner(s.t, repo)
	full := append([]string{args[0], "--stack", stackName, "-C", s.dir}, args[1:]...)
	cmd := exec.Command(bin, full...)
	cmd.Env = append(os.Environ(), "PULUMI_BACKEND_URL="+s.backend, "PULUMI_CONFIG_PASSPHRASE="+passphrase)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		s.t.Fatalf("milner %s: %v", strings.Join(args, " "), err)
	}
	s.t.Logf("milner %s: exit %d in %s\n%s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond), out)
	return code, string(out)
}

// remove takes app name out of the config.
func (s *appsScenario) remove(name string) {
	s.t.Helper()
	s.apps = slices.DeleteFunc(s.apps, func(a app) bool { return a.Name == name })
	s.apply()
}

// defaultClass is the name of the cluster's one default StorageClass.
func defaultClass(t *testing.T, api *apiServer) string {
	t.Helper()
	var names []string
	for _, sc := range api.items("/apis/storage.k8s.io/v1/storageclasses") {
		ann, _ := sc["metadata"].(map[string]any)["annotations"].(map[string]any)
		if ann["storageclass.kubernetes.io/is-default-class"] == "true" {
			names = append(names, str(sc, "metadata", "name"))
		}
	}
	if len(names) != 1 {
		t.Fatalf("want exactly one default StorageClass, got %q", names)
	}
	return names[0]
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// steps formats steps for failure messages.
func steps(ss []gate.Step) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "\n  %s %s %s diffs=%v failed=%v", s.Op, s.Type, s.Name(), s.Diffs, s.Failed)
	}
	return b.String()
}
