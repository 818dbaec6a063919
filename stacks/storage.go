package stacks

import (
	"encoding/json"
	"fmt"
	"github.com/milner/milner/components/vocab"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	storagev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/storage/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/components/helmapp"
	"github.com/milner/milner/components/lifecycle"
	"github.com/milner/milner/stacks/config"
)

// LocalPathProvisioner is the provisioner name the chart's provisioner
// registers (chart value storageClass.provisionerName; without it the chart
// derives cluster.local/<fullname>, _helpers.tpl "provisionerName") and the
// StorageClass names.
const LocalPathProvisioner = "rancher.io/local-path"

// DefaultClassAnnotation marks the cluster's default StorageClass
// (https://kubernetes.io/docs/concepts/storage/storage-classes/#default-storageclass).
const DefaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// Storage is the storage layer: local-path-provisioner on every node's data
// disk, and the default StorageClass that names it.
type Storage struct {
	// App is the provisioner's Helm release, in a privileged namespace.
	App *helmapp.HelmApp
	// Class is the default StorageClass.
	Class *storagev1.StorageClass
}

// deployStorage installs the provisioner and creates the default
// StorageClass. The class is a program object, not the chart's
// (storageClass.create is false): its reclaim policy and default flag are
// typed config, and it exists whether or not a chart can be fetched.
func deployStorage(ctx *pulumi.Context, cfg *config.Config, k8s *kubernetes.Provider, adopt map[string]string, hooks *lifecycle.Hooks) (*Storage, error) {
	s := cfg.Storage
	// Keys checked against the chart's values.yaml and README (chart 0.0.33):
	// storageClass.create, storageClass.provisionerName, nodePathMap.
	values := map[string]any{
		"storageClass": map[string]any{"create": false, "provisionerName": LocalPathProvisioner},
		"nodePathMap": []any{map[string]any{
			"node":  "DEFAULT_PATH_FOR_NON_LISTED_NODES",
			"paths": []any{s.Path},
		}},
	}
	app, err := helmapp.New(ctx, config.StorageAppName, &helmapp.Args{
		ReleaseName: config.StorageAppName,
		Chart:       chartOf(cfg, s.Chart),
		Namespace:   s.Namespace,
		// The provisioner's helper pods mount host paths, which only the
		// privileged level admits (Talos' local storage guide labels the
		// namespace so).
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
	classOpts := []pulumi.ResourceOption{pulumi.Provider(k8s), pulumi.Parent(app)}
	if id, ok := adopt[config.StorageAppName+"-class"]; ok {
		classOpts = append(classOpts, pulumi.Import(pulumi.ID(id)))
	}
	class, err := storagev1.NewStorageClass(ctx, config.StorageAppName+"-class", &storagev1.StorageClassArgs{
		Metadata: &metav1.ObjectMetaArgs{
			Name:        pulumi.String(s.StorageClass),
			Annotations: pulumi.StringMap{DefaultClassAnnotation: pulumi.String("true")},
		},
		Provisioner:   pulumi.String(LocalPathProvisioner),
		ReclaimPolicy: pulumi.String(s.ReclaimPolicy),
		// A local volume lives on one node: bind it where its pod is scheduled.
		VolumeBindingMode: pulumi.String("WaitForFirstConsumer"),
	}, classOpts...)
	if err != nil {
		return nil, fmt.Errorf("storage: class %s: %w", s.StorageClass, err)
	}
	return &Storage{App: app, Class: class}, nil
}

// storagePatch is the Talos patch that makes the volumes' directory visible
// to the kubelet, bind-mounted rshared and read-write: Talos' local storage
// guide (https://www.talos.dev/v1.9/kubernetes-guides/configuration/local-storage/,
// "Local Path Provisioner") sets exactly this machine.kubelet.extraMounts entry.
func storagePatch(path string) (string, error) {
	patch := map[string]any{"machine": map[string]any{"kubelet": map[string]any{"extraMounts": []any{
		map[string]any{
			"destination": path,
			"type":        "bind",
			"source":      path,
			"options":     []string{"bind", "rshared", "rw"},
		},
	}}}}
	b, err := json.Marshal(patch)
	return string(b), err
}
