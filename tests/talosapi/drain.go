package talosapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DrainTiming is how long Talos' cordon and drain takes its time
// (WithKubernetes).
type DrainTiming struct {
	// Timeout bounds the whole drain: talos v1.13.9 (v1.11.5 and v1.12.0
	// the same) pkg/kubernetes/kubernetes.go DrainTimeout, 5 minutes.
	Timeout time.Duration
	// EvictRetry is the wait before an eviction the API refuses with 429
	// (a PodDisruptionBudget) is asked again: Client.evict's
	// time.Sleep(5 * time.Second).
	EvictRetry time.Duration
	// CordonWait bounds the wait for the node to be cordoned by Talos'
	// controllers before the drain (v1alpha1_sequencer_tasks.go
	// waitForNodeCordoned: one minute).
	CordonWait time.Duration
	// DeleteWait bounds the wait for an evicted pod to be gone
	// (Client.waitForPodDeleted: retry.Constant(time.Minute), asked every
	// 3 s).
	DeleteWait, DeletePoll time.Duration
}

// RealDrain is Talos' own drain timing.
var RealDrain = DrainTiming{Timeout: 5 * time.Minute, EvictRetry: 5 * time.Second, CordonWait: time.Minute, DeleteWait: time.Minute, DeletePoll: 3 * time.Second}

// CIDrain is RealDrain scaled down tenfold, as clusterapi.CIKubelet.
var CIDrain = DrainTiming{Timeout: RealDrain.Timeout / 10, EvictRetry: RealDrain.EvictRetry / 10, CordonWait: RealDrain.CordonWait / 10, DeleteWait: RealDrain.DeleteWait / 10, DeletePoll: RealDrain.DeletePoll / 10}

// WithKubernetes is the Kubernetes API the nodes' drain goes through (the
// kubelet's kubeconfig, which Talos' CordonAndDrainNode uses:
// kubernetes.NewClientFromKubeletKubeconfig), with its timing. Without it
// Shutdown and Upgrade drain nothing, as a node that never joined
// Kubernetes (CordonAndDrainNode returns at once when the kubelet has no
// client certificate).
func WithKubernetes(cs kubernetes.Interface, t DrainTiming) Option {
	return func(o *clusterOptions) { o.kube, o.drain = cs, t }
}

// SetKubernetes sets WithKubernetes on a running cluster: a scenario
// whose Kubernetes API starts only once a control plane holds its config
// (tests/clusterapi) hands it to the doubles then, as each kubelet's
// kubeconfig reaches the API server only once there is one.
func (c *Cluster) SetKubernetes(cs kubernetes.Interface, t DrainTiming) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opts.kube, c.opts.drain = cs, t
}

// WithInstallerPull is how long pulling the installer image takes
// (default 0): MachineService.Upgrade pulls and validates it before it
// answers (talos v1.13.9 v1alpha1_server.go Upgrade:
// install.PullAndValidateInstallerImage, before the etcd check), and
// v1.13's ImageService.Pull before it answers the image's name (an image
// already pulled answers at once). A pull's duration is the
// registry's and the image's (the v1.13 installer is a few hundred MB), not
// a Talos constant.
func WithInstallerPull(d time.Duration) Option {
	return func(o *clusterOptions) { o.installerPull = d }
}

// cordonAndDrain is Talos' drain phase (talos v1.13.9
// v1alpha1_sequencer_tasks.go CordonAndDrainNode, pkg/kubernetes
// Client.Drain; the same in v1.11.5 and v1.12.0) on the Kubernetes Node
// nodeName:
//   - a Node Kubernetes does not know is the node that never joined:
//     nothing to do;
//   - the node is cordoned by Talos' controllers when its stage becomes
//     upgrading or shutting down (controllers/k8s/node_apply.go
//     ApplyCordoned: unschedulable, annotation talos.dev/cordoned), and
//     the task waits up to CordonWait for that;
//   - the pods on the node are listed (a failure fails the drain: "cannot
//     get pods for node"), and each is evicted in parallel except mirror
//     pods, pods no controller owns and DaemonSet pods; an eviction refused
//     with 429 (a PodDisruptionBudget) is asked again after EvictRetry, a
//     successful one waits up to DeleteWait for the pod to be gone;
//   - an eviction that fails, the ones a budget refuses until the drain's
//     Timeout among them, is only logged ("WARNING: failed to evict pod:
//     ..."): the drain returns nil and the sequence goes on, the pod left
//     running until the node goes down.
//
// So only a node that cannot be cordoned or whose pods cannot be listed
// fails the drain, and with it the sequence. warn receives each WARNING.
func (n *Node) cordonAndDrain(ctx context.Context, nodeName string, warn func(string)) error {
	n.c.mu.Lock()
	cs, t := n.c.opts.kube, n.c.opts.drain
	n.c.mu.Unlock()
	if cs == nil {
		return nil
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil
	}
	if err := n.cordon(ctx, cs, nodeName, t.CordonWait); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		return fmt.Errorf("cannot get pods for node %s: %w", nodeName, err)
	}
	var wg sync.WaitGroup
	for _, pod := range pods.Items {
		if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if c := metav1.GetControllerOf(&pod); c == nil || c.Kind == "DaemonSet" {
			continue
		}
		wg.Go(func() {
			if err := evict(ctx, cs, pod, t); err != nil {
				warn(fmt.Sprintf("WARNING: failed to evict pod: %v", err))
			}
		})
	}
	wg.Wait()
	return nil
}

// cordon is Talos' controllers cordoning the node, and
// waitForNodeCordoned's wait for it.
func (n *Node) cordon(ctx context.Context, cs kubernetes.Interface, nodeName string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		err := func() error {
			node, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil || node.Spec.Unschedulable {
				return err
			}
			node.Spec.Unschedulable = true
			if node.Annotations == nil {
				node.Annotations = map[string]string{}
			}
			node.Annotations[constants.AnnotationCordonedKey] = constants.AnnotationCordonedValue
			_, err = cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			return err
		}()
		if err == nil {
			n.c.mu.Lock()
			n.cordoned = true
			n.c.mu.Unlock()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// uncordon is Talos' controllers at the next boot (stage booting or
// running): a node Talos cordoned is made schedulable again, one cordoned
// by someone else is left (ApplyCordoned).
func (n *Node) uncordon(nodeName string) {
	n.c.mu.Lock()
	cs := n.c.opts.kube
	n.c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil || !node.Spec.Unschedulable {
		return
	}
	if _, ok := node.Annotations[constants.AnnotationCordonedKey]; !ok {
		return
	}
	node.Spec.Unschedulable = false
	delete(node.Annotations, constants.AnnotationCordonedKey)
	_, _ = cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
}

// evict is Client.evict: the eviction (grace period 60 s), asked again
// after a 429, then the wait for the pod to be gone. Talos sends
// policy/v1beta1's Eviction; the double sends policy/v1's, which the API
// server answers the same way.
func evict(ctx context.Context, cs kubernetes.Interface, p corev1.Pod, t DrainTiming) error {
	grace := int64(60)
	for {
		// A real client-go request on a done context fails with its error
		// (how Talos' loop ends at the drain's timeout); a fake may not.
		err := ctx.Err()
		if err == nil {
			err = cs.CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{
				ObjectMeta:    metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
				DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace},
			})
		}
		switch {
		case apierrors.IsTooManyRequests(err):
			time.Sleep(t.EvictRetry)
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("failed to evict pod %s/%s: %w", p.Namespace, p.Name, err)
		default:
			if err := waitForPodDeleted(ctx, cs, p, t); err != nil {
				return fmt.Errorf("failed waiting on pod %s/%s to be deleted: %w", p.Namespace, p.Name, err)
			}
			return nil
		}
	}
}

// waitForPodDeleted is Client.waitForPodDeleted.
func waitForPodDeleted(ctx context.Context, cs kubernetes.Interface, p corev1.Pod, t DrainTiming) error {
	ctx, cancel := context.WithTimeout(ctx, t.DeleteWait)
	defer cancel()
	for {
		pod, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
			return nil
		case err == nil && pod.UID != p.UID:
			return nil
		case err == nil:
			err = errors.New("pod is still running on the node")
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(t.DeletePoll):
		}
	}
}
