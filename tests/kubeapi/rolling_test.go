//go:build integration

package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
)

// The apps gate of a rolling upgrade (upgrade.Apps.Ready) on a real API
// server with its real controllers: the StatefulSet and Deployment
// controllers make the Pods and count the Ready ones; the test plays the
// kubelet, writing each Pod's status (its Ready condition, as the
// kubelet sets it from the readiness probe: for Vault, the chart's
// `vault status`, failing while sealed). The workloads' own status is
// only ever written by the controllers.
//
// TestRollingAppsGateOnRealAPI): the real StatefulSet and Deployment
// controllers make the Pods and count the Ready ones; the test plays the
// kubelet, writing Pod readiness; a Vault pod not Ready with its container
// running is named sealed. Its place in the sequence (checked before the
// first node, waited for after each, the run stopped before the next node,
// rerun resumes) runs against the Talos API test double
// (`TestAppsGateStopsBeforeTheNextNode`, `TestAppsGateWaitsForTheApps`,
// `TestAppsNotReadyBeforeTheFirstNodeTouchesNothing`). A real Vault pod
// sealed by a real reboot needs a real Talos node.
func TestRollingAppsGateOnRealAPI(t *testing.T) {
	api := startAPIServer(t)
	api.startControllerManager()
	ctx := context.Background()
	kc := kubernetes.NewForConfigOrDie(api.restConfig())

	off := false
	cfg := &config.Config{
		Storage: config.StorageConfig{Enabled: &off},
		Apps: []config.AppConfig{
			{Name: "vault", Namespace: "vault", Vault: &config.VaultConfig{}},
			{Name: "woodpecker", Namespace: "woodpecker"},
		},
	}
	for _, ns := range []string{"vault", "woodpecker"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// As vault-helm v0.29.1 renders the server: three replicas, Parallel,
	// labelled app.kubernetes.io/name=vault, component=server.
	vaultLabels := map[string]string{"app.kubernetes.io/name": "vault", "app.kubernetes.io/instance": "vault", "component": "server"}
	three := int32(3)
	if _, err := kc.AppsV1().StatefulSets("vault").Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "vault"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &three, ServiceName: "vault-internal", PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Selector:       &metav1.LabelSelector{MatchLabels: vaultLabels},
			Template:       podTemplateSpec(vaultLabels, "vault"),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serverLabels := map[string]string{"app.kubernetes.io/name": "server"}
	if _, err := kc.AppsV1().Deployments("woodpecker").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "woodpecker-server"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: serverLabels},
			Template: podTemplateSpec(serverLabels, "server"),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	apps, err := upgrade.NewApps(cfg, []byte(api.Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	// The controllers made the Pods; none is Ready yet (no kubelet). No
	// scheduler runs: bind them as it would, vault-<i> on cp-<i+1> and
	// woodpecker's server on cp-3 (the Binding subresource sets
	// spec.nodeName, which the replace gate reads).
	pods := waitPods(t, kc, "vault", 3)
	for _, p := range pods {
		i, err := strconv.Atoi(strings.TrimPrefix(p.Name, "vault-"))
		if err != nil {
			t.Fatal(err)
		}
		bind(t, kc, &p, fmt.Sprintf("cp-%d", i+1))
	}
	for _, p := range waitPods(t, kc, "woodpecker", 1) {
		bind(t, kc, &p, "cp-3")
	}
	err = apps.Ready(ctx)
	if err == nil || !strings.Contains(err.Error(), "statefulset vault/vault has 0/3 replicas ready") ||
		!strings.Contains(err.Error(), "deployment woodpecker/woodpecker-server has 0/1 replicas ready") {
		t.Fatalf("fresh Pods: want both workloads not ready, got %v", err)
	}
	t.Logf("fresh Pods: %v", err)

	// Every container runs and is Ready: the gate opens once the
	// controllers have counted them.
	for _, ns := range []string{"vault", "woodpecker"} {
		list, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			setPodReady(t, kc, &list.Items[i], true)
		}
	}
	if err := waitReady(ctx, apps, 30*time.Second); err != nil {
		t.Fatalf("every Pod Ready: the gate stays shut: %v", err)
	}

	// A node rebooted: vault-1's container runs again, but Vault is sealed,
	// so the probe fails and the kubelet reports the Pod not Ready.
	for _, p := range pods {
		if p.Name == "vault-1" {
			cur, err := kc.CoreV1().Pods("vault").Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			setPodReady(t, kc, cur, false)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for err = apps.Ready(ctx); err == nil && time.Now().Before(deadline); err = apps.Ready(ctx) {
		time.Sleep(200 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "statefulset vault/vault has 2/3 replicas ready: vault-1 is sealed: run `milner vault unseal`") {
		t.Fatalf("vault-1 sealed: want the gate to name it, got %v", err)
	}
	if strings.Contains(err.Error(), "woodpecker") || strings.Contains(err.Error(), "vault-0") {
		t.Fatalf("vault-1 sealed: the gate names what is Ready: %v", err)
	}
	t.Logf("vault-1 sealed: %v", err)

	// The gate before `milner up --replace`: vault-1's node, cp-2, may be
	// replaced (its own Pod is excused: the node may be dead); cp-3 may
	// not, while vault-1 is sealed: a second peer would go down.
	if err := apps.ReadyBesides(ctx, []string{"cp-2"}); err != nil {
		t.Fatalf("replace cp-2 while its own vault-1 is sealed: want the gate open, got %v", err)
	}
	err = apps.ReadyBesides(ctx, []string{"cp-3"})
	var notReady *upgrade.NotReadyError
	if !errors.As(err, &notReady) || !strings.Contains(err.Error(), "vault-1 is sealed") || strings.Contains(err.Error(), "woodpecker") {
		t.Fatalf("replace cp-3 while vault-1 on cp-2 is sealed: want the gate to name vault-1 only, got %v", err)
	}
	t.Logf("replace cp-3 while vault-1 is sealed: %v", err)

	// vault-1 unsealed again; woodpecker's server, on cp-3, goes down:
	// replacing cp-3 excuses it, replacing cp-1 does not.
	cur, err := kc.CoreV1().Pods("vault").Get(ctx, "vault-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setPodReady(t, kc, cur, true)
	wp, err := kc.CoreV1().Pods("woodpecker").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setPodReady(t, kc, &wp.Items[0], false)
	deadline = time.Now().Add(30 * time.Second)
	for err = apps.ReadyBesides(ctx, []string{"cp-1"}); !strings.Contains(fmt.Sprint(err), "woodpecker-server has 0/1") && time.Now().Before(deadline); err = apps.ReadyBesides(ctx, []string{"cp-1"}) {
		time.Sleep(200 * time.Millisecond)
	}
	if !errors.As(err, &notReady) || strings.Contains(err.Error(), "vault") {
		t.Fatalf("replace cp-1 while woodpecker's server on cp-3 is down: want the gate to name it only, got %v", err)
	}
	if err := apps.ReadyBesides(ctx, []string{"cp-3"}); err != nil {
		t.Fatalf("replace cp-3, woodpecker's server on it down: want the gate open, got %v", err)
	}
}

// bind binds a Pod to a node, as the scheduler does.
func bind(t *testing.T, kc kubernetes.Interface, p *corev1.Pod, node string) {
	t.Helper()
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := kc.CoreV1().Pods(p.Namespace).Bind(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind %s to %s: %v", p.Name, node, err)
	}
}

// podTemplateSpec is a one-container pod template.
func podTemplateSpec(labels map[string]string, container string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: "registry.k8s.io/pause:3.10"}}},
	}
}

// waitPods waits until the controllers made n Pods in ns.
func waitPods(t *testing.T, kc kubernetes.Interface, ns string, n int) []corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := kc.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == n {
			return list.Items
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d Pods after 1m, want %d", ns, len(list.Items), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// setPodReady writes a Pod's status as the kubelet would: running, its
// container started, Ready or not as its readiness probe says.
func setPodReady(t *testing.T, kc kubernetes.Interface, p *corev1.Pod, ready bool) {
	t.Helper()
	now := metav1.Now()
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: now}}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: ready,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	if _, err := kc.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s/%s status: %v", p.Namespace, p.Name, err)
	}
}

// waitReady waits for the apps gate to open.
func waitReady(ctx context.Context, apps *upgrade.Apps, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := apps.Ready(ctx)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
