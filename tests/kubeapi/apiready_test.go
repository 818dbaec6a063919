//go:build integration

package kubeapi

import (
	"context"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/milner/milner/internal/apiready"
)

// TestAPIReadyOnTheRealAPIServer (issues 34, 45): the wait between two
// control planes lists a real kube-apiserver's kube-apiserver mirror pods
// at the node's own address, checking its certificate for the cluster
// endpoint's name (the kubeconfig's server, here kubernetes.default.svc,
// which the serving certificate holds and loopback's address alone would
// not be checked against), with the admin client identity. It waits while
// the node's pod runs an older config version (the kubelet has not polled
// yet), returns once the pod at the node's version is Ready (the test
// writes it as the kubelet would), and fails against an address no API
// server answers.
func TestAPIReadyOnTheRealAPIServer(t *testing.T) {
	s := startAPIServer(t)
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	node := netip.MustParseAddrPort(u.Host)
	kube := strings.Replace(s.Kubeconfig, s.URL, "https://kubernetes.default.svc:6443", 1)
	kc := kubernetes.NewForConfigOrDie(s.restConfig())
	ctx := context.Background()
	// The service account admission wants the namespace's default account
	// (no controller manager runs to make it).
	if _, err := kc.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := kc.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-cp-1", Labels: map[string]string{"k8s-app": "kube-apiserver"},
			Annotations: map[string]string{constants.AnnotationStaticPodConfigVersion: "4"}},
		Spec: corev1.PodSpec{NodeName: "cp-1", AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "kube-apiserver", Image: "registry.k8s.io/kube-apiserver:v1.36.3"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: node.Addr().String(),
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	if pod, err = kc.CoreV1().Pods("kube-system").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet restarts the pod at version 5 three seconds from now.
	restarted := time.Now().Add(3 * time.Second)
	go func() {
		time.Sleep(time.Until(restarted))
		pod.Annotations[constants.AnnotationStaticPodConfigVersion] = "5"
		if pod, err := kc.CoreV1().Pods("kube-system").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Errorf("the kubelet's update: %v (pod %v)", err, pod)
		}
	}()
	version := func(context.Context) (string, error) { return "5", nil }
	var out strings.Builder
	err = apiready.Wait(ctx, []byte(kube), apiready.Node{Name: "cp-1", API: node, ConfigVersion: version}, apiready.Options{Timeout: 30 * time.Second, Poll: 500 * time.Millisecond, Out: &out})
	if err != nil {
		t.Fatalf("the pod runs the node's config, yet the wait failed: %v", err)
	}
	if time.Now().Before(restarted) {
		t.Fatalf("the wait passed while the old API server ran: %s", out.String())
	}
	t.Logf("%s", strings.TrimSpace(out.String()))

	closed := netip.AddrPortFrom(node.Addr(), uint16(freePort(t)))
	err = apiready.Wait(ctx, []byte(kube), apiready.Node{Name: "cp-2", API: closed, ConfigVersion: version}, apiready.Options{Timeout: 3 * time.Second, Poll: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "node cp-2") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a node whose API server does not answer: want an error naming cp-2 and the refusal, got %v", err)
	}
}
