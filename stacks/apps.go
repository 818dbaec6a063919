package stacks

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	rbacv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/rbac/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/components/helmapp"
	"github.com/milner/milner/components/lifecycle"
	"github.com/milner/milner/components/workloads"
	"github.com/milner/milner/stacks/config"
)

// AppsLayer is everything the apps layer declares.
type AppsLayer struct {
	// Storage is the storage layer (nil when milner:storage.enabled is false).
	Storage *Storage
	// LoadBalancer is MetalLB and its pool (nil when the stack has no pool).
	LoadBalancer *LoadBalancer
	// Apps are the Helm releases of milner:apps, in config order.
	Apps []*helmapp.HelmApp
	// Workloads is the reservation of milner:workloads (nil when unset).
	Workloads *workloads.Workloads
	// OIDCBindings are the ClusterRoleBindings of
	// milner:cluster.oidc.groupBindings, by group name order.
	OIDCBindings []*rbacv1.ClusterRoleBinding
}

// deployApps creates the cluster's Kubernetes provider, the storage layer,
// one HelmApp per configured app (after the storage), and the workloads'
// reservation. adopt maps logical names to the live objects they import
// (RunOptions.Adopt).
func deployApps(ctx *pulumi.Context, cfg *config.Config, kubeconfig pulumi.StringOutput, adopt map[string]string, hooks *lifecycle.Hooks) (*AppsLayer, error) {
	name := cfg.Cluster.Name
	// An explicit provider, never the ambient kubeconfig. The cluster
	// identifier is fixed so that a rotated kubeconfig updates the provider
	// in place instead of replacing every release.
	k8s, err := kubernetes.NewProvider(ctx, name+"-k8s", &kubernetes.ProviderArgs{
		Kubeconfig:        kubeconfig,
		ClusterIdentifier: pulumi.String(name),
	})
	if err != nil {
		return nil, fmt.Errorf("apps %q: kubernetes provider: %w", name, err)
	}
	layer := &AppsLayer{}
	if layer.OIDCBindings, err = deployOIDCBindings(ctx, cfg, k8s); err != nil {
		return nil, err
	}
	storageClass := ""
	var afterStorage []pulumi.Resource
	if cfg.Storage.On() {
		if layer.Storage, err = deployStorage(ctx, cfg, k8s, adopt, hooks); err != nil {
			return nil, err
		}
		storageClass = cfg.Storage.StorageClass
		// Apps create PVCs (Vault's raft and audit volumes, Woodpecker's
		// server volume); a PVC binds only once the provisioner runs and the
		// class exists. The charts name the class as a plain string, so no
		// data edge orders them: this does.
		afterStorage = []pulumi.Resource{layer.Storage.App.Release, layer.Storage.Class}
	}
	if cfg.LBOn() {
		if layer.LoadBalancer, err = deployLoadBalancer(ctx, cfg, k8s, adopt, hooks); err != nil {
			return nil, err
		}
		// A release waits for its LoadBalancer Services to get an address
		// (helm.sh/helm/v3 pkg/kube/ready.go serviceReady: a LoadBalancer
		// without status.loadBalancer.ingress is not ready), which only the
		// pool gives: every app follows the pool and its advertisement.
		afterStorage = append(afterStorage, layer.LoadBalancer.Pool, layer.LoadBalancer.Advertisement)
	}
	for i, app := range cfg.Apps {
		if app.WoodpeckerOff() {
			continue // no forge: config's warning says Woodpecker is off
		}
		ap := fmt.Sprintf("%s[%d]", config.Key("apps"), i)
		values, secrets, err := appValues(ctx, cfg, app, storageClass)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ap, err)
		}
		a, err := helmapp.New(ctx, app.Name, &helmapp.Args{
			ReleaseName:    app.ReleaseName,
			Chart:          chartOf(cfg, app.Chart),
			Namespace:      app.Namespace,
			PodSecurity:    app.PodSecurity,
			Secrets:        secrets,
			Values:         values,
			Provider:       k8s,
			RetainOnDelete: app.RetainOnDelete,
			PreviousNames:  app.PreviousNames,
			SkipAwait:      !cfg.WaitForApps,
			DependsOn:      afterStorage,
			Adopt:          adopt,
			Hooks:          hooks,
		})
		if err != nil {
			return nil, err
		}
		layer.Apps = append(layer.Apps, a)
	}
	if w := cfg.Workloads; w != nil {
		layer.Workloads, err = workloads.New(ctx, w.Name, &workloads.Args{
			Namespace:        w.Namespace,
			PodSecurity:      w.PodSecurity,
			Quota:            w.Quota,
			DefaultRequest:   w.DefaultRequest,
			DefaultLimit:     w.DefaultLimit,
			Max:              w.Max,
			Priority:         w.Priority,
			PreemptionPolicy: w.PreemptionPolicy,
			Provider:         k8s,
			SkipAwait:        !cfg.WaitForApps,
			Adopt:            adopt,
		})
		if err != nil {
			return nil, err
		}
	}
	return layer, nil
}

// appValues returns an app's chart values and the Secrets its chart reads:
// the hardened profile's values (Vault, Woodpecker) with the stack's values
// merged over them (validation refused values the profile owns), then each
// secret value read from its secret config key at its dotted path.
func appValues(ctx *pulumi.Context, cfg *config.Config, app config.AppConfig, storageClass string) (pulumi.Map, []helmapp.Secret, error) {
	base := map[string]any{}
	var secrets []helmapp.Secret
	switch {
	case app.Vault != nil:
		base, secrets = vaultProfile(ctx, app, storageClass)
	case app.Woodpecker != nil:
		base, secrets = woodpeckerProfile(ctx, app, storageClass)
	}
	merge(base, app.Values)
	values, _ := toInput(base).(pulumi.Map)
	for _, path := range slices.Sorted(maps.Keys(app.SecretValues)) {
		value := secret(ctx, app.SecretValues[path])
		if err := setPath(values, strings.Split(path, "."), value); err != nil {
			return nil, nil, fmt.Errorf("secretValues[%s]: %w", path, err)
		}
	}
	return values, secrets, nil
}

// merge deep-merges src into dst: maps merge key by key, anything else in
// src replaces dst's value.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// toInput converts a decoded JSON value into a Pulumi input.
func toInput(v any) pulumi.Input {
	switch v := v.(type) {
	case map[string]any:
		m := pulumi.Map{}
		for k, e := range v {
			m[k] = toInput(e)
		}
		return m
	case []any:
		a := pulumi.Array{}
		for _, e := range v {
			a = append(a, toInput(e))
		}
		return a
	default:
		return pulumi.Any(v)
	}
}

// setPath sets value at a dotted path inside m, creating maps on the way.
func setPath(m pulumi.Map, path []string, value pulumi.Input) error {
	for i, k := range path[:len(path)-1] {
		next, ok := m[k]
		if !ok {
			next = pulumi.Map{}
			m[k] = next
		}
		nested, ok := next.(pulumi.Map)
		if !ok {
			return fmt.Errorf("%s is not a map in values", strings.Join(path[:i+1], "."))
		}
		m = nested
	}
	m[path[len(path)-1]] = value
	return nil
}

// chartOf is a chart pin as a HelmApp takes it: the published coordinates,
// and the source they are fetched from through milner:chartMirrors.
func chartOf(c *config.Config, ch config.ChartConfig) helmapp.Chart {
	return helmapp.Chart{Repo: ch.Repo, Name: ch.Name, Version: ch.Version, Path: ch.Path, FetchRepo: c.ChartMirrors.Fetch(ch.Repo)}
}
