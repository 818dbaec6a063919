package stacks

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"

	"github.com/milner/milner/components/helmapp"
)

// deployApps creates the cluster's Kubernetes provider and one HelmApp per
// configured app.
func deployApps(ctx *pulumi.Context, cfg *Config, kubeconfig pulumi.StringOutput) ([]*helmapp.HelmApp, error) {
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
	var apps []*helmapp.HelmApp
	for i, app := range cfg.Apps {
		values, err := helmValues(ctx, app)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", key("apps"), i, err)
		}
		a, err := helmapp.New(ctx, app.Name, &helmapp.Args{
			ReleaseName:    app.ReleaseName,
			Repo:           app.Chart.Repo,
			Chart:          app.Chart.Name,
			Version:        app.Chart.Version,
			Namespace:      app.Namespace,
			Values:         values,
			Provider:       k8s,
			RetainOnDelete: app.RetainOnDelete,
			PreviousNames:  app.PreviousNames,
		})
		if err != nil {
			return nil, err
		}
		apps = append(apps, a)
	}
	return apps, nil
}

// helmValues turns an app's config values into inputs, with each secret value
// read from its secret config key and set at its dotted path.
func helmValues(ctx *pulumi.Context, app AppConfig) (pulumi.Map, error) {
	values := pulumi.Map{}
	for k, v := range app.Values {
		values[k] = toInput(v)
	}
	for _, path := range sortedKeys(app.SecretValues) {
		secret := config.GetSecret(ctx, key(app.SecretValues[path]))
		if err := setPath(values, strings.Split(path, "."), secret); err != nil {
			return nil, fmt.Errorf("secretValues[%s]: %w", path, err)
		}
	}
	return values, nil
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
