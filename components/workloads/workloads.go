// Package workloads reserves room in the cluster for a hosted system that
// is not a Helm release (the seeds' Evolved-NPCs simulation): its
// namespace, a ResourceQuota bounding what it may claim, a LimitRange giving
// every container defaults and a ceiling, and a PriorityClass its pods name.
//
// Logical names created here ("<name>-ns", "<name>-quota", "<name>-limits",
// "<name>-priority") are a state contract.
package workloads

import (
	"fmt"
	"github.com/milner/milner/components/vocab"

	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	schedulingv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/scheduling/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/components/podsecurity"
)

// Type is the type token of the Workloads component. It is part of every
// child's URN: changing it orphans the reservation in state.
const Type = "milner:components:Workloads"

// Args sizes one reservation. Quantities are Kubernetes quantities ("4",
// "500m", "16Gi").
type Args struct {
	// Namespace is the namespace the workloads run in; the PriorityClass has the same name.
	Namespace string
	// PodSecurity is the Pod Security Standard the namespace enforces.
	PodSecurity vocab.PodSecurityLevel
	// Quota is the ResourceQuota's spec.hard (e.g. requests.cpu, limits.memory, pods).
	Quota map[string]string
	// DefaultRequest is the LimitRange's per-container default request.
	DefaultRequest map[string]string
	// DefaultLimit is the LimitRange's per-container default limit.
	DefaultLimit map[string]string
	// Max is the LimitRange's per-container maximum.
	Max map[string]string
	// Priority is the PriorityClass value.
	Priority int
	// PreemptionPolicy is PreemptLowerPriority or Never.
	PreemptionPolicy string
	// Provider is the explicit Kubernetes provider of the cluster.
	Provider pulumi.ProviderResource
	// SkipAwait creates the quota without waiting for its status.
	// Test-only: for an API server without a controller manager.
	SkipAwait bool
	// Adopt maps a child's logical name to the id of the live object it
	// imports (as helmapp.Args.Adopt); nil for a normal run.
	Adopt map[string]string
}

// Workloads is the reservation of one hosted system.
type Workloads struct {
	pulumi.ResourceState

	// Namespace is the workloads' namespace, known once it exists.
	Namespace pulumi.StringOutput `pulumi:"namespace"`
	// PriorityClassName is the PriorityClass the workloads' pods name.
	PriorityClassName pulumi.StringOutput `pulumi:"priorityClassName"`
}

// New creates the reservation. name is its logical name.
func New(ctx *pulumi.Context, name string, args *Args, opts ...pulumi.ResourceOption) (*Workloads, error) {
	w := &Workloads{}
	if err := ctx.RegisterComponentResource(Type, name, w, opts...); err != nil {
		return nil, err
	}
	// child is a child's options: parented, the cluster's provider, and
	// the import of the live object adopt maps its logical name to.
	child := func(suffix string) []pulumi.ResourceOption {
		opts := []pulumi.ResourceOption{pulumi.Parent(w), pulumi.Provider(args.Provider)}
		if id, ok := args.Adopt[name+suffix]; ok {
			opts = append(opts, pulumi.Import(pulumi.ID(id)))
		}
		return opts
	}

	ns, err := corev1.NewNamespace(ctx, name+"-ns", &corev1.NamespaceArgs{
		Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(args.Namespace), Labels: podsecurity.Labels(args.PodSecurity)},
	}, append(child("-ns"),
		// Policy: deleting a namespace deletes the workloads and their data;
		// Milner never does that (as for an app's namespace).
		pulumi.RetainOnDelete(true))...)
	if err != nil {
		return nil, fmt.Errorf("workloads %q: namespace: %w", name, err)
	}
	namespace := ns.Metadata.Name().Elem()

	if _, err := corev1.NewResourceQuota(ctx, name+"-quota", &corev1.ResourceQuotaArgs{
		Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(args.Namespace + "-quota"), Namespace: namespace,
			Annotations: skipAwait(args.SkipAwait)},
		Spec: &corev1.ResourceQuotaSpecArgs{Hard: pulumi.ToStringMap(args.Quota)},
	}, child("-quota")...); err != nil {
		return nil, fmt.Errorf("workloads %q: quota: %w", name, err)
	}

	if _, err := corev1.NewLimitRange(ctx, name+"-limits", &corev1.LimitRangeArgs{
		Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(args.Namespace + "-limits"), Namespace: namespace},
		Spec: &corev1.LimitRangeSpecArgs{Limits: corev1.LimitRangeItemArray{&corev1.LimitRangeItemArgs{
			Type:           pulumi.String("Container"),
			DefaultRequest: pulumi.ToStringMap(args.DefaultRequest),
			Default:        pulumi.ToStringMap(args.DefaultLimit),
			Max:            pulumi.ToStringMap(args.Max),
		}}},
	}, child("-limits")...); err != nil {
		return nil, fmt.Errorf("workloads %q: limit range: %w", name, err)
	}

	pc, err := schedulingv1.NewPriorityClass(ctx, name+"-priority", &schedulingv1.PriorityClassArgs{
		Metadata:         &metav1.ObjectMetaArgs{Name: pulumi.String(args.Namespace)},
		Value:            pulumi.Int(args.Priority),
		PreemptionPolicy: pulumi.String(args.PreemptionPolicy),
		GlobalDefault:    pulumi.Bool(false),
		Description:      pulumi.String("Milner: the priority of the workloads in namespace " + args.Namespace),
	}, child("-priority")...)
	if err != nil {
		return nil, fmt.Errorf("workloads %q: priority class: %w", name, err)
	}

	w.Namespace = namespace
	w.PriorityClassName = pc.Metadata.Name().Elem()
	if err := ctx.RegisterResourceOutputs(w, pulumi.Map{
		"namespace":         w.Namespace,
		"priorityClassName": w.PriorityClassName,
	}); err != nil {
		return nil, err
	}
	return w, nil
}

// skipAwait is the annotation that makes the Kubernetes provider create an
// object without waiting for it to become ready, when skip is set. The
// provider waits for a ResourceQuota until its status.hard equals its
// spec.hard (pulumi-kubernetes provider/v4 pkg/await/awaiters.go,
// untilCoreV1ResourceQuotaInitialized), which kube-controller-manager's
// resource quota controller fills in; an API server without one never does.
func skipAwait(skip bool) pulumi.StringMap {
	if !skip {
		return nil
	}
	return pulumi.StringMap{"pulumi.com/skipAwait": pulumi.String("true")}
}
