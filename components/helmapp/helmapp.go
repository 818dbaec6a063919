// Package helmapp installs one Helm release and reconciles it in place.
//
// A release is never recreated: it has a fixed release name, a pinned chart
// version (or a local chart, pinned by the repository that holds it), and
// upgrades are atomic (a failed upgrade rolls back). The app
// owns its namespace, created with its PodSecurity labels before the
// release, and the Secrets its chart reads by name. Logical names created
// here ("<app>-release", "<app>-ns", "<app>-<secret suffix>") are a state
// contract; renaming an app uses aliases.
package helmapp

import (
	"fmt"
	"github.com/milner/milner/components/vocab"
	"strings"

	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	helmv3 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/helm/v3"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/components/lifecycle"
	"github.com/milner/milner/components/podsecurity"
)

// Type is the type token of the HelmApp component. It is part of every
// child's URN: changing it orphans every release in state.
const Type = "milner:components:HelmApp"

// TimeoutSeconds bounds one install or upgrade before Helm rolls it back.
const TimeoutSeconds = 600

// Secret is one Kubernetes Secret the app's chart reads by name (e.g.
// through envFrom), created in the app's namespace before the release so
// that its values never pass through Helm values or the release record.
type Secret struct {
	// Suffix names the Secret: "<releaseName>-<suffix>" in the cluster and
	// "<app>-<suffix>" as its logical name (a state contract).
	Suffix string
	// Type is the Secret type, e.g. Opaque or kubernetes.io/tls.
	Type string
	// Data is the Secret's string data; every value is secret.
	Data pulumi.StringMapInput
}

// SecretName is the in-cluster name of an app's Secret: what a chart value
// referring to it must say.
func SecretName(releaseName, suffix string) string { return releaseName + "-" + suffix }

// Chart pins a release's chart: a chart of a repository (Repo, Name,
// Version) or a local chart (Path).
type Chart struct {
	// Repo is the chart's published repository: an https:// index or an
	// oci:// registry path.
	Repo string
	// Name is the chart name in Repo.
	Name string
	// Version is the pinned chart version.
	Version string
	// FetchRepo is where the chart is fetched from: a mirror of Repo, or
	// Repo itself ("" is Repo).
	FetchRepo string
	// Path is a local chart directory, instead of Repo, Name and Version:
	// relative to the project directory, where the engine starts the
	// Kubernetes provider (see New).
	Path string
}

// Args configures one Helm release.
type Args struct {
	// ReleaseName is the Helm release name; fixed, so the release is never renamed.
	ReleaseName string
	// Chart is the pinned chart and where it is fetched from.
	Chart Chart
	// Namespace is the namespace the app owns and its release lives in.
	Namespace string
	// PodSecurity is the Pod Security Standard the namespace enforces.
	PodSecurity vocab.PodSecurityLevel
	// Secrets are the Secrets the chart reads by name.
	Secrets []Secret
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
	// SkipAwait installs and upgrades without waiting for the release's
	// pods to become ready, and so without atomic rollback (Helm's atomic
	// implies wait). Test-only: for an API server without kubelets.
	SkipAwait bool
	// DependsOn are resources the release must follow although no value of
	// the release refers to them (e.g. the storage its PVCs bind to).
	DependsOn []pulumi.Resource
	// Adopt maps a child's logical name ("<app>-ns", "<app>-release",
	// "<app>-<secret suffix>") to the id of the live object it imports
	// (milner adopt's one-shot import, internal/appsadopt); nil for a
	// normal run.
	Adopt map[string]string
	// Hooks are the run's lifecycle hooks: a release not retained on
	// delete is bound to lifecycle.KeepRelease.
	Hooks *lifecycle.Hooks
}

// adopted is the import option of the child named name when adopt maps it
// to a live object's id (none otherwise).
func adopted(adopt map[string]string, name string) []pulumi.ResourceOption {
	if id, ok := adopt[name]; ok {
		return []pulumi.ResourceOption{pulumi.Import(pulumi.ID(id))}
	}
	return nil
}

// HelmApp is one Helm release.
type HelmApp struct {
	pulumi.ResourceState

	// Status is the release's Helm status.
	Status pulumi.StringOutput `pulumi:"status"`
	// Revision is the release's Helm revision.
	Revision pulumi.IntOutput `pulumi:"revision"`

	// Release is the Helm release, for resources that must follow it.
	Release *helmv3.Release
}

// New installs or upgrades the release. name is the app's logical name.
func New(ctx *pulumi.Context, name string, args *Args, opts ...pulumi.ResourceOption) (*HelmApp, error) {
	a := &HelmApp{}
	var componentAliases []pulumi.Alias
	for _, old := range args.PreviousNames {
		componentAliases = append(componentAliases, pulumi.Alias{Name: pulumi.String(old)})
	}
	opts = append(opts, pulumi.Aliases(componentAliases))
	if err := ctx.RegisterComponentResource(Type, name, a, opts...); err != nil {
		return nil, err
	}
	// childAliases moves a child of a renamed app: "<old>-<suffix>" was its name.
	childAliases := func(suffix string) pulumi.ResourceOption {
		var aliases []pulumi.Alias
		for _, old := range args.PreviousNames {
			aliases = append(aliases, pulumi.Alias{Name: pulumi.String(old + suffix)})
		}
		return pulumi.Aliases(aliases)
	}

	ns, err := corev1.NewNamespace(ctx, name+"-ns", &corev1.NamespaceArgs{
		Metadata: &metav1.ObjectMetaArgs{
			Name:   pulumi.String(args.Namespace),
			Labels: podsecurity.Labels(args.PodSecurity),
		},
	}, append(adopted(args.Adopt, name+"-ns"),
		pulumi.Parent(a),
		pulumi.Provider(args.Provider),
		childAliases("-ns"),
		// Policy: deleting a namespace deletes everything in it, the PVCs
		// and their data included. Milner never does that; an app that
		// leaves the config leaves its namespace behind.
		pulumi.RetainOnDelete(true),
	)...)
	if err != nil {
		return nil, fmt.Errorf("helmapp %q: namespace: %w", name, err)
	}
	namespace := ns.Metadata.Name().Elem()

	var secrets []pulumi.Resource
	for _, s := range args.Secrets {
		secret, err := corev1.NewSecret(ctx, name+"-"+s.Suffix, &corev1.SecretArgs{
			Metadata: &metav1.ObjectMetaArgs{
				Name:      pulumi.String(SecretName(args.ReleaseName, s.Suffix)),
				Namespace: namespace,
			},
			Type:       pulumi.String(s.Type),
			StringData: pulumi.ToSecret(s.Data).(pulumi.StringMapOutput),
		}, append(adopted(args.Adopt, name+"-"+s.Suffix), pulumi.Parent(a), pulumi.Provider(args.Provider), childAliases("-"+s.Suffix))...)
		if err != nil {
			return nil, fmt.Errorf("helmapp %q: secret %s: %w", name, s.Suffix, err)
		}
		secrets = append(secrets, secret)
	}

	fetch := args.Chart.FetchRepo
	if fetch == "" {
		fetch = args.Chart.Repo
	}
	chart := args.Chart.Name
	var repoOpts helmv3.RepositoryOptsPtrInput = &helmv3.RepositoryOptsArgs{Repo: pulumi.String(fetch)}
	var version pulumi.StringPtrInput = pulumi.String(args.Chart.Version)
	switch {
	case args.Chart.Path != "":
		// A local chart: the chart input is its path, with no repository
		// and no version. The provider loads a path without a repository
		// as a local chart when it is a directory holding Chart.yaml
		// (pulumi-kubernetes provider/v4 pkg/provider/helm_release.go:
		// locateChart, localChart), relative to its working directory, the
		// project directory (pulumi pkg/v3 engine/project.go getPwdMain:
		// the root when Pulumi.yaml has no main; sdk/v3 resource/plugin
		// plugin.go: cmd.Dir = pwd), and its Check records the chart's own
		// version (chart.Metadata.Version) as the release's version input:
		// bumping Chart.yaml's version is what plans an upgrade. A relative
		// path keeps the state the same in every checkout.
		chart, repoOpts, version = args.Chart.Path, nil, nil
	case strings.HasPrefix(fetch, "oci://"):
		// An OCI chart is addressed by its full reference and has no index.
		chart, repoOpts = strings.TrimSuffix(fetch, "/")+"/"+args.Chart.Name, nil
	}

	releaseOpts := append(adopted(args.Adopt, name+"-release"),
		pulumi.Parent(a),
		pulumi.Provider(args.Provider),
		childAliases("-release"),
		// Policy: a release is reconciled, rolled back, or (when asked)
		// left behind; never deleted behind the user's back.
		pulumi.RetainOnDelete(args.RetainOnDelete),
		// The chart reads the Secrets by name, a plain string in its values:
		// no data edge orders them before the release, so this does. The
		// caller's dependencies have no data edge either (see Args.DependsOn).
		pulumi.DependsOn(append(secrets, args.DependsOn...)),
	)
	if !args.RetainOnDelete {
		// Policy: a plain `pulumi preview`/`up` refuses the release's
		// delete (and replace) too, naming Milner's rule.
		releaseOpts = append(releaseOpts, args.Hooks.Release())
	}
	release, err := helmv3.NewRelease(ctx, name+"-release", &helmv3.ReleaseArgs{
		Name:           pulumi.String(args.ReleaseName),
		Chart:          pulumi.String(chart),
		Version:        version,
		RepositoryOpts: repoOpts,
		// From the namespace's output: the namespace, with its PodSecurity
		// labels, exists before any pod of the release is admitted.
		Namespace:       namespace,
		CreateNamespace: pulumi.Bool(false),
		Values:          args.Values,
		// A failed install or upgrade rolls back to the last good revision.
		// Helm's atomic implies waiting for the pods (helm.sh/helm/v3
		// pkg/action install.go and upgrade.go: Wait = Wait || Atomic), so
		// a release that must not wait cannot be atomic.
		Atomic:        pulumi.Bool(!args.SkipAwait),
		SkipAwait:     pulumi.Bool(args.SkipAwait),
		CleanupOnFail: pulumi.Bool(true),
		Timeout:       pulumi.Int(TimeoutSeconds),
	}, releaseOpts...)
	if err != nil {
		return nil, fmt.Errorf("helmapp %q: release: %w", name, err)
	}
	a.Release = release
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
