//go:build integration

package kubeapi

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The harness's API server admits as a cluster's does: PodSecurity enforces a
// namespace's level on pods, ServiceAccount admission needs the account, and
// DefaultStorageClass names the default class in a claim that names none.
// The scenarios rely on all three.
func TestAPIServerAdmission(t *testing.T) {
	s := startAPIServer(t)
	s.namespace("psa-restricted", map[string]any{"pod-security.kubernetes.io/enforce": "restricted"})

	restricted := podTemplate(map[string]any{
		"securityContext": map[string]any{"runAsNonRoot": true, "runAsUser": 65532,
			"seccompProfile": map[string]any{"type": "RuntimeDefault"}},
		"containers": []any{map[string]any{"name": "app", "image": "registry.k8s.io/pause:3.10",
			"securityContext": map[string]any{"allowPrivilegeEscalation": false,
				"capabilities": map[string]any{"drop": []any{"ALL"}}}}},
	})
	if err := s.admitPod("psa-restricted", restricted); err != nil {
		t.Fatalf("a restricted pod was refused: %v", err)
	}
	privileged := podTemplate(map[string]any{
		"containers": []any{map[string]any{"name": "app", "image": "registry.k8s.io/pause:3.10",
			"securityContext": map[string]any{"privileged": true}}},
	})
	err := s.admitPod("psa-restricted", privileged)
	if err == nil || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
		t.Fatalf("a privileged pod in a restricted namespace: want a PodSecurity refusal, got %v", err)
	}
	t.Logf("PodSecurity refused the privileged pod: %v", err)

	s.defaultStorageClass("test-default")
	// DefaultStorageClass admission reads the classes from an informer's
	// cache (k8s.io/kubernetes plugin/pkg/admission/storage/storageclass/setdefault),
	// which learns of a new class a moment after it is created.
	var got string
	for deadline := time.Now().Add(10 * time.Second); got == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		pvc, err := s.create("/api/v1/namespaces/psa-restricted/persistentvolumeclaims", map[string]any{
			"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": map[string]any{"name": "claim"},
			"spec": map[string]any{"accessModes": []any{"ReadWriteOnce"},
				"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}},
		}, true)
		if err != nil {
			t.Fatal(err)
		}
		got = str(pvc, "spec", "storageClassName")
	}
	if got != "test-default" {
		t.Fatalf("a claim naming no class: want storageClassName test-default from admission, got %q", got)
	}
}

// namespace creates a namespace with labels and, as kube-controller-manager's
// service-account controller would, its "default" ServiceAccount (no
// controller manager runs here; ServiceAccount admission refuses pods of a
// namespace without it).
func (s *apiServer) namespace(name string, labels map[string]any) {
	s.t.Helper()
	if _, err := s.create("/api/v1/namespaces", map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "labels": labels}}, false); err != nil {
		s.t.Fatal(err)
	}
	s.defaultServiceAccount(name)
}

// defaultServiceAccount creates namespace ns's "default" ServiceAccount
// unless it exists.
func (s *apiServer) defaultServiceAccount(ns string) {
	s.t.Helper()
	if _, err := s.get("/api/v1/namespaces/" + ns + "/serviceaccounts/default"); err == nil {
		return
	}
	if _, err := s.create("/api/v1/namespaces/"+ns+"/serviceaccounts", map[string]any{"apiVersion": "v1",
		"kind": "ServiceAccount", "metadata": map[string]any{"name": "default"}}, false); err != nil {
		s.t.Fatal(err)
	}
}

// defaultStorageClass creates a StorageClass marked as the cluster default.
func (s *apiServer) defaultStorageClass(name string) {
	s.t.Helper()
	if _, err := s.create("/apis/storage.k8s.io/v1/storageclasses", map[string]any{
		"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
		"metadata": map[string]any{"name": name, "annotations": map[string]any{
			"storageclass.kubernetes.io/is-default-class": "true"}},
		"provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer",
	}, false); err != nil {
		s.t.Fatal(err)
	}
}

// podTemplate is a pod template with spec.
func podTemplate(spec map[string]any) map[string]any {
	return map[string]any{"metadata": map[string]any{}, "spec": spec}
}

// admitPod sends a pod made from a pod template through the API server's
// full admission chain in namespace ns without storing it (dryRun=All):
// PodSecurity enforces only on pods, not on the Deployments that carry their
// templates (k8s.io/pod-security-admission v0.34.4 admission/admission.go:
// ValidatePodController calls EvaluatePod with enforce=false, so a workload
// gets warnings and audit annotations only), and without a controller
// manager no pod is ever created from a template. This puts every template a
// chart renders through the enforcing check a real pod would meet.
func (s *apiServer) admitPod(ns string, template map[string]any) error {
	meta, _ := template["metadata"].(map[string]any)
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"generateName": "admit-", "labels": meta["labels"]},
		"spec":     template["spec"]}
	if _, err := s.create("/api/v1/namespaces/"+ns+"/pods", pod, true); err != nil {
		return fmt.Errorf("pod template in %s: %w", ns, err)
	}
	return nil
}

// str reads a string at a path of nested maps ("" if absent).
func str(obj map[string]any, path ...string) string {
	var cur any = obj
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[k]
	}
	v, _ := cur.(string)
	return v
}
