// Package helmapp installs one Helm release and reconciles it in place.
//
// A release is never recreated: it has a fixed release name, a pinned chart
// version, and upgrades are atomic (a failed upgrade rolls back). The logical
// name "<app>-release" is a state contract; renaming an app uses aliases.
package helmapp

import (
	"fmt"
	"strings"

	helmv3 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/helm/v3"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Type is the type token of the HelmApp component. It is part of every
// child's URN: changing it orphans every release in state.
const Type = "milner:components:HelmApp"

// TimeoutSeconds bounds one install or upgrade before Helm rolls it back.
const TimeoutSeconds = 600

// Args configures one Helm release.
type Args struct {
	// ReleaseName is the Helm release name; fixed, so the release is never renamed.
	ReleaseName string
	// Repo is the chart repository: an https:// index or an oci:// registry path.
	Repo string
	// Chart is the chart name in Repo.
	Chart string
	// Version is the pinned chart version.
	Version string
	// Namespace is where the release lives; created if missing.
	Namespace string
	// Values are the chart values, secret ones included as secret outputs.
	Values pulumi.MapInput
	// Provider is the explicit Kubernetes provider of the cluster.
	Provider pulumi.ProviderResource
	// RetainOnDelete leaves the release (and its volumes) in the cluster when
	// the app leaves the config, for apps whose data must outlive them.
	RetainOnDelete bool
	// PreviousNames are the app's former logical names, aliased so a rename
	// moves the release in state instead of reinstalling it.
	PreviousNames []string
}

// HelmApp is one Helm release.
type HelmApp struct {
	pulumi.ResourceState

	// Status is the release's Helm status.
	Status pulumi.StringOutput `pulumi:"status"`
	// Revision is the release's Helm revision.
	Revision pulumi.IntOutput `pulumi:"revision"`
}

// New installs or upgrades the release. name is the app's logical name.
func New(ctx *pulumi.Context, name string, args *Args, opts ...pulumi.ResourceOption) (*HelmApp, error) {
	a := &HelmApp{}
	var componentAliases, releaseAliases []pulumi.Alias
	for _, old := range args.PreviousNames {
		componentAliases = append(componentAliases, pulumi.Alias{Name: pulumi.String(old)})
		releaseAliases = append(releaseAliases, pulumi.Alias{Name: pulumi.String(old + "-release")})
	}
	opts = append(opts, pulumi.Aliases(componentAliases))
	if err := ctx.RegisterComponentResource(Type, name, a, opts...); err != nil {
		return nil, err
	}

	chart := args.Chart
	var repoOpts helmv3.RepositoryOptsPtrInput = &helmv3.RepositoryOptsArgs{Repo: pulumi.String(args.Repo)}
	if strings.HasPrefix(args.Repo, "oci://") {
		// An OCI chart is addressed by its full reference and has no index.
		chart, repoOpts = strings.TrimSuffix(args.Repo, "/")+"/"+args.Chart, nil
	}

	releaseOpts := []pulumi.ResourceOption{
		pulumi.Parent(a),
		pulumi.Provider(args.Provider),
		pulumi.Aliases(releaseAliases),
		// Policy: a release is reconciled, rolled back, or (when asked)
		// left behind; never deleted behind the user's back.
		pulumi.RetainOnDelete(args.RetainOnDelete),
	}
	release, err := helmv3.NewRelease(ctx, name+"-release", &helmv3.ReleaseArgs{
		Name:            pulumi.String(args.ReleaseName),
		Chart:           pulumi.String(chart),
		Version:         pulumi.String(args.Version),
		RepositoryOpts:  repoOpts,
		Namespace:       pulumi.String(args.Namespace),
		CreateNamespace: pulumi.Bool(true),
		Values:          args.Values,
		// A failed install or upgrade rolls back to the last good revision.
		Atomic:        pulumi.Bool(true),
		CleanupOnFail: pulumi.Bool(true),
		Timeout:       pulumi.Int(TimeoutSeconds),
	}, releaseOpts...)
	if err != nil {
		return nil, fmt.Errorf("helmapp %q: release: %w", name, err)
	}
	a.Status = release.Status.Status()
	a.Revision = release.Status.Revision().Elem()

	if err := ctx.RegisterResourceOutputs(a, pulumi.Map{
		"status":   a.Status,
		"revision": a.Revision,
	}); err != nil {
		return nil, err
	}
	return a, nil
}
