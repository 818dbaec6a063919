//go:build integration

package kubeapi

import (
	"encoding/json"
	"fmt"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	helmv3 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/helm/v3"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	storagev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/storage/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
)

// releaseProgram is the apps layer reduced to what the release semantics need,
// for the real engine while the program cannot yet start at the apps layer
// against a given kubeconfig: an explicit provider from milner:kubeconfig, a
// default StorageClass, and per app of milner:apps a namespace with its
// PodSecurity labels and a Helm release of a local chart that does not wait
// for pods (no kubelet runs). The resource options are those of
// components/helmapp: aliases from previousNames, retainOnDelete, a
// namespace that is never deleted.
func releaseProgram(ctx *pulumi.Context) error {
	c := config.New(ctx, "milner")
	var apps []app
	if err := json.Unmarshal([]byte(c.Require("apps")), &apps); err != nil {
		return fmt.Errorf("milner:apps: %w", err)
	}
	k8s, err := kubernetes.NewProvider(ctx, "kubeapi-it-k8s", &kubernetes.ProviderArgs{
		Kubeconfig:        c.RequireSecret("kubeconfig"),
		ClusterIdentifier: pulumi.String("kubeapi-it"),
	})
	if err != nil {
		return err
	}
	sc, err := storagev1.NewStorageClass(ctx, "local-path", &storagev1.StorageClassArgs{
		Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String("local-path"), Annotations: pulumi.StringMap{
			"storageclass.kubernetes.io/is-default-class": pulumi.String("true")}},
		Provisioner:       pulumi.String("rancher.io/local-path"),
		VolumeBindingMode: pulumi.String("WaitForFirstConsumer"),
		ReclaimPolicy:     pulumi.String("Retain"),
	}, pulumi.Provider(k8s))
	if err != nil {
		return err
	}
	for _, a := range apps {
		aliases := func(suffix string) pulumi.ResourceOption {
			var as []pulumi.Alias
			for _, old := range a.PreviousNames {
				as = append(as, pulumi.Alias{Name: pulumi.String(old + suffix)})
			}
			return pulumi.Aliases(as)
		}
		labels := pulumi.StringMap{}
		for _, mode := range []string{"enforce", "audit", "warn"} {
			labels["pod-security.kubernetes.io/"+mode] = pulumi.String(a.PodSecurity)
		}
		ns, err := corev1.NewNamespace(ctx, a.Name+"-ns", &corev1.NamespaceArgs{
			Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(a.Namespace), Labels: labels},
		}, pulumi.Provider(k8s), aliases("-ns"), pulumi.RetainOnDelete(true))
		if err != nil {
			return err
		}
		values := pulumi.Map{}
		for k, v := range a.Values {
			values[k] = pulumi.Any(v)
		}
		path, _ := a.Chart["path"].(string)
		if _, err := helmv3.NewRelease(ctx, a.Name+"-release", &helmv3.ReleaseArgs{
			Name:      pulumi.String(a.ReleaseName),
			Chart:     pulumi.String(path),
			Namespace: ns.Metadata.Name().Elem(),
			Values:    values,
			SkipAwait: pulumi.Bool(true),
			Timeout:   pulumi.Int(600),
		}, pulumi.Provider(k8s), aliases("-release"), pulumi.RetainOnDelete(a.RetainOnDelete),
			pulumi.DependsOn([]pulumi.Resource{sc})); err != nil {
			return err
		}
	}
	return nil
}
