package appsadopt

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/sig"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/milner/milner/internal/gate"
)

const urnPrefix = "urn:pulumi:it::milner::"

// step is a preview step of the apps layer as the engine reports it.
func step(op apitype.OpType, typ, parentType, name string, inputs map[string]any) gate.Step {
	t := typ
	if parentType != "" {
		t = parentType + "$" + typ
	}
	return gate.Step{Op: op, Type: typ, URN: urnPrefix + t + "::" + name, Inputs: inputs}
}

func meta(name, ns string) map[string]any {
	m := map[string]any{"name": name}
	if ns != "" {
		m["namespace"] = ns
	}
	return map[string]any{"metadata": m}
}

const helmApp, workloadsType = "milner:components:HelmApp", "milner:components:Workloads"

// previewSteps is a preview of a stack that lost its state: Vault from a
// chart repository, the storage chart from an OCI registry, a local test
// chart, the workloads and the storage class; the secret's namespace is
// unknown (an output of the namespace being created).
func previewSteps() []gate.Step {
	return []gate.Step{
		step(apitype.OpCreate, helmApp, "", "vault", nil),
		step(apitype.OpCreate, TypeNamespace, helmApp, "vault-ns", meta("vault", "")),
		step(apitype.OpCreate, TypeSecret, helmApp, "vault-tls", meta("vault-tls", sig.UnknownStringValue)),
		step(apitype.OpCreate, TypeRelease, helmApp, "vault-release", map[string]any{
			"name": "vault", "namespace": sig.UnknownStringValue, "chart": "vault", "version": "0.29.1",
			"repositoryOpts": map[string]any{"repo": "http://127.0.0.1:1/hashicorp"}}),
		step(apitype.OpCreate, TypeRelease, helmApp, "local-path-provisioner-release", map[string]any{
			"name": "local-path-provisioner", "namespace": "local-path-storage", "version": "0.0.33",
			"chart": "oci://127.0.0.1:2/rancher/local-path-provisioner/charts/local-path-provisioner"}),
		step(apitype.OpCreate, TypeStorageClass, helmApp, "local-path-provisioner-class", meta("local-path", "")),
		step(apitype.OpCreate, TypeRelease, helmApp, "alpha-release", map[string]any{
			"name": "alpha", "namespace": "alpha", "chart": "charts/milner-test", "version": "0.1.0"}),
		step(apitype.OpSame, TypeNamespace, helmApp, "beta-ns", meta("beta", "")), // in state: not declared anew
		step(apitype.OpCreate, TypeNamespace, workloadsType, "npc-ns", meta("npc", "")),
		step(apitype.OpCreate, TypeResourceQuota, workloadsType, "npc-quota", meta("npc-quota", "npc")),
		step(apitype.OpCreate, TypePriorityClass, workloadsType, "npc-priority", meta("npc", "")),
		step(apitype.OpCreate, "pulumi:providers:kubernetes", "", "it-k8s", nil),
	}
}

func projectWithTestChart(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "charts", "milner-test"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "charts", "milner-test", "Chart.yaml"), []byte("apiVersion: v2\nname: milner-test\nversion: 0.1.0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDeclaredIsWhatThePreviewCreates(t *testing.T) {
	objs, err := Declared(previewSteps(), projectWithTestChart(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Logical()+" "+o.ImportID()+" "+o.Chart)
	}
	want := []string{
		"vault-ns vault ",
		"vault-tls vault/vault-tls ",
		"vault-release vault/vault vault",
		"local-path-provisioner-release local-path-storage/local-path-provisioner local-path-provisioner",
		"local-path-provisioner-class local-path ",
		"alpha-release alpha/alpha milner-test",
		"npc-ns npc ",
		"npc-quota npc/npc-quota ",
		"npc-priority npc ",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("declared:\n got %q\nwant %q", got, want)
	}
}

func TestDeclaredRefusesWhatThePreviewDoesNotName(t *testing.T) {
	steps := []gate.Step{step(apitype.OpCreate, TypeSecret, helmApp, "orphan-tls", meta("orphan-tls", sig.UnknownStringValue))}
	if _, err := Declared(steps, t.TempDir()); err == nil || !strings.Contains(err.Error(), "orphan-tls: the preview does not say its name and namespace") {
		t.Fatalf("want the unnamed namespace refused, got %v", err)
	}
}

// helmSecret is a Helm storage record as Helm writes it
// (pkg/storage/driver/secrets.go newSecretsObject, util.go encodeRelease).
func helmSecret(t *testing.T, ns, release, chart, version string, revision int) *corev1.Secret {
	t.Helper()
	rec, err := json.Marshal(map[string]any{
		"name": release, "namespace": ns, "version": revision, "info": map[string]any{"status": "deployed"},
		"chart": map[string]any{"metadata": map[string]any{"name": chart, "version": version}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	rev := strconv.Itoa(revision)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1." + release + ".v" + rev, Namespace: ns,
			Labels: map[string]string{"owner": "helm", "name": release, "version": rev, "status": "deployed"}},
		Type: "helm.sh/release.v1",
		Data: map[string][]byte{"release": []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))},
	}
}

func TestDecideAdoptsWhatTheClusterHoldsAndRefusesAnotherChart(t *testing.T) {
	objs := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vault"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vault-tls", Namespace: "vault"}},
		helmSecret(t, "vault", "vault", "vault", "0.29.1", 1),
		helmSecret(t, "vault", "vault", "vault", "0.30.1", 3), // the latest revision is the release
		helmSecret(t, "vault", "vault", "vault", "0.29.1", 2),
		// Another chart's release under the storage release's name and namespace.
		helmSecret(t, "local-path-storage", "local-path-provisioner", "nfs-subdir-external-provisioner", "4.0.18", 5),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "npc"}},
		// And the same name in another namespace is no evidence for alpha.
		helmSecret(t, "default", "alpha", "milner-test", "0.1.0", 1),
	}
	c := &kubeCluster{client: fake.NewClientset(objs...)}
	declared, err := Declared(previewSteps(), projectWithTestChart(t))
	if err != nil {
		t.Fatal(err)
	}
	plan, refusals, err := Decide(context.Background(), declared, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(refusals) != 1 {
		t.Fatalf("want one refusal, got %v", refusals)
	}
	r := refusals[0].String()
	for _, want := range []string{"local-path-provisioner-release", "nfs-subdir-external-provisioner 4.0.18", "declares chart local-path-provisioner"} {
		if !strings.Contains(r, want) {
			t.Errorf("refusal lacks %q: %s", want, r)
		}
	}
	want := map[string]string{"vault-ns": "vault", "vault-tls": "vault/vault-tls", "vault-release": "vault/vault", "npc-ns": "npc"}
	if got := plan.Adopt(); !reflect.DeepEqual(got, want) {
		t.Fatalf("adopted %v, want %v", got, want)
	}
	if rel := plan.Releases[declared[2].URN]; rel == nil || rel.Revision != 3 || rel.Version != "0.30.1" || rel.Chart != "vault" {
		t.Fatalf("vault-release: want the latest revision 3 of chart vault 0.30.1, got %+v", rel)
	}
}

// importedRelease is a release's state right after the provider's import:
// name, namespace, chart, version and values read back, nothing else.
func importedRelease(urn string) apitype.ResourceV3 {
	return apitype.ResourceV3{URN: resource.URN(urn), Type: TypeRelease, Custom: true, ID: "vault/vault",
		Inputs: map[string]any{"name": "vault", "namespace": "vault", "chart": "vault", "version": "0.29.1",
			"values": map[string]any{"server": map[string]any{"logLevel": "info"}}, "timeout": float64(300)},
		Outputs: map[string]any{"name": "vault", "namespace": "vault", "chart": "vault", "version": "0.29.1",
			"values":   map[string]any{"server": map[string]any{"logLevel": "info"}},
			"__inputs": map[string]any{sig.Key: sig.Secret, "ciphertext": "x"}},
	}
}

func TestCompleteRecordsOnlyTheRunInputs(t *testing.T) {
	dep := &apitype.DeploymentV3{Resources: []apitype.ResourceV3{importedRelease(urnPrefix + helmApp + "$" + TypeRelease + "::vault-release")}}
	update := step(apitype.OpUpdate, TypeRelease, helmApp, "vault-release", map[string]any{
		"name": "vault", "namespace": "vault", "chart": "vault", "version": "0.30.1",
		"values": map[string]any{"server": map[string]any{"logLevel": "debug"}},
		"atomic": false, "skipAwait": true, "cleanupOnFail": true, "timeout": float64(600),
		"repositoryOpts": map[string]any{"repo": "http://127.0.0.1:1/hashicorp"},
	})
	done, err := Complete(dep, []gate.Step{update})
	if err != nil || !reflect.DeepEqual(done, []string{"vault-release"}) {
		t.Fatalf("complete: %v %v", done, err)
	}
	out := dep.Resources[0].Outputs
	for k, want := range map[string]any{"skipAwait": true, "cleanupOnFail": true, "timeout": float64(600), "atomic": false,
		"repositoryOpts": map[string]any{"repo": "http://127.0.0.1:1/hashicorp"}} {
		if !reflect.DeepEqual(out[k], want) || !reflect.DeepEqual(dep.Resources[0].Inputs[k], want) {
			t.Errorf("%s: outputs %v inputs %v, want %v", k, out[k], dep.Resources[0].Inputs[k], want)
		}
	}
	// What the release is stays as the cluster answered: the next preview
	// shows the stack's 0.30.1 and logLevel debug as an update.
	if out["version"] != "0.29.1" || mustJSON(t, out["values"]) != `{"server":{"logLevel":"info"}}` {
		t.Errorf("version or values were overwritten: %v %v", out["version"], out["values"])
	}
	if mustJSON(t, out["__inputs"]) != `{"4dabf18193072939515e22adb298388d":"1b47061264138c4ac30d75fd1eb44270","ciphertext":"x"}` {
		t.Errorf("__inputs changed: %v", out["__inputs"])
	}
	// A run input the preview only shows masked cannot be recorded.
	update.Inputs["repositoryOpts"] = map[string]any{"repo": "https://charts.example", "password": "[secret]"}
	if _, err := Complete(dep, []gate.Step{update}); err == nil || !strings.Contains(err.Error(), "repositoryOpts is secret") {
		t.Fatalf("want a masked run input refused, got %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
