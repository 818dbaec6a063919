package stacks

import (
	"fmt"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apiextensions"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/components/helmapp"
	"github.com/milner/milner/components/lifecycle"
	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/stacks/config"
)

// MetalLB's API for an L2 pool (go.universe.tf/metallb v0.16.1
// api/v1beta1: ipaddresspool_types.go, l2advertisement_types.go).
const (
	metallbAPIVersion = "metallb.io/v1beta1"
	// LBPoolName names the IPAddressPool and the L2Advertisement that
	// announces it, in MetalLB's namespace.
	LBPoolName = "milner"
	// LBAddressAnnotation asks MetalLB for exactly one address of the pool
	// on a Service (MetalLB's usage docs, "Requesting specific IPs"; it
	// replaces the Kubernetes field spec.loadBalancerIP, deprecated since
	// Kubernetes 1.24). The controller refuses to give any other address.
	LBAddressAnnotation = "metallb.io/loadBalancerIPs"
)

// LoadBalancer is MetalLB in L2 mode: its release, the address pool and
// the L2 advertisement of that pool.
type LoadBalancer struct {
	// App is MetalLB's Helm release (controller and speaker).
	App *helmapp.HelmApp
	// Pool is the IPAddressPool the controller assigns Services from.
	Pool *apiextensions.CustomResource
	// Advertisement makes the speakers answer ARP for the pool's addresses.
	Advertisement *apiextensions.CustomResource
}

// deployLoadBalancer installs MetalLB from its chart and declares the
// stack's pool. The pool and advertisement follow the release: the chart
// installs their CRDs and the controller's validating webhook, which the
// API server calls on every IPAddressPool (the release waits for the
// controller, so the webhook answers; with milner:waitForApps off it does
// not, and the pool's create fails until the controller runs: the chart's
// crds.validationFailurePolicy is Fail).
func deployLoadBalancer(ctx *pulumi.Context, cfg *config.Config, k8s *kubernetes.Provider, adopt map[string]string, hooks *lifecycle.Hooks) (*LoadBalancer, error) {
	l := cfg.LoadBalancer
	pool := cfg.LBPool()
	// Keys checked against the chart's values.yaml (chart 0.16.1):
	// frrk8s.enabled (default true: the frr-k8s subchart, a BGP daemon on
	// every node) and speaker.frr.enabled (default false). L2 mode needs
	// neither: the speaker answers ARP itself (MetalLB's layer2 mode).
	values := map[string]any{
		"frrk8s":  map[string]any{"enabled": false},
		"speaker": map[string]any{"frr": map[string]any{"enabled": false}},
	}
	app, err := helmapp.New(ctx, config.LoadBalancerAppName, &helmapp.Args{
		ReleaseName: config.LoadBalancerAppName,
		Chart:       chartOf(cfg, l.Chart),
		Namespace:   l.Namespace,
		// The speaker runs on the host network with NET_RAW (chart
		// speaker.yaml: hostNetwork: true, capabilities NET_RAW), which
		// only the privileged level admits; MetalLB's installation guide
		// labels its namespace so.
		PodSecurity: vocab.Privileged,
		Values:      toInput(values).(pulumi.Map),
		Provider:    k8s,
		SkipAwait:   !cfg.WaitForApps,
		Adopt:       adopt,
		Hooks:       hooks,
	})
	if err != nil {
		return nil, err
	}
	cr := func(name, kind string, spec map[string]any, deps ...pulumi.Resource) (*apiextensions.CustomResource, error) {
		opts := []pulumi.ResourceOption{pulumi.Provider(k8s), pulumi.Parent(app), pulumi.DependsOn(append([]pulumi.Resource{app.Release}, deps...))}
		if id, ok := adopt[name]; ok {
			opts = append(opts, pulumi.Import(pulumi.ID(id)))
		}
		return apiextensions.NewCustomResource(ctx, name, &apiextensions.CustomResourceArgs{
			ApiVersion:  pulumi.String(metallbAPIVersion),
			Kind:        pulumi.String(kind),
			Metadata:    &metav1.ObjectMetaArgs{Name: pulumi.String(LBPoolName), Namespace: pulumi.String(l.Namespace)},
			OtherFields: kubernetes.UntypedArgs{"spec": spec},
		}, opts...)
	}
	lb := &LoadBalancer{App: app}
	if lb.Pool, err = cr(config.LoadBalancerAppName+"-pool", "IPAddressPool", map[string]any{
		"addresses": []any{fmt.Sprintf("%s-%s", pool.From, pool.To)},
	}); err != nil {
		return nil, fmt.Errorf("load balancer: pool: %w", err)
	}
	if lb.Advertisement, err = cr(config.LoadBalancerAppName+"-l2", "L2Advertisement", map[string]any{
		"ipAddressPools": []any{LBPoolName},
	}, lb.Pool); err != nil {
		return nil, fmt.Errorf("load balancer: L2 advertisement: %w", err)
	}
	return lb, nil
}
