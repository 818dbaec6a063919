package talosapi

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
)

// canApplyImmediate is machined's decision whether a config applies
// without a reboot (talos v1.9.5 internal/app/machined/pkg/runtime/
// v1alpha1/v1alpha1_runtime.go, Runtime.CanApplyImmediate; the same list
// in v1.12.0): the new config may differ from the running one only in
// these parts of its v1alpha1 document, every other difference needs a
// reboot. Other documents are not compared, as there.
//
//   - .debug, .cluster
//   - .machine.ca, .acceptedCAs, .time, .certSANs, .install, .network,
//     .sysfs, .sysctls, .logging, .controlplane, .kubelet, .kernel,
//     .registries, .pods, .seccompProfiles, .nodeAnnotations, .nodeLabels,
//     .nodeTaints
//   - .machine.features.kubernetesTalosAPIAccess, .kubePrism, .hostDNS,
//     .imageCache, .nodeAddressSortAlgorithm
func canApplyImmediate(current, next config.Provider) error {
	if current == nil {
		return errors.New("no current config")
	}
	currentConfig := current.RawV1Alpha1()
	if currentConfig == nil {
		return errors.New("current config is not v1alpha1")
	}
	newConfig := next.RawV1Alpha1()
	if newConfig == nil {
		return errors.New("new config is not v1alpha1")
	}
	newConfig = newConfig.DeepCopy()
	newConfig.ConfigDebug = currentConfig.ConfigDebug
	newConfig.ClusterConfig = currentConfig.ClusterConfig
	if nm, cm := newConfig.MachineConfig, currentConfig.MachineConfig; nm != nil && cm != nil {
		nm.MachineCA = cm.MachineCA
		nm.MachineAcceptedCAs = cm.MachineAcceptedCAs
		nm.MachineTime = cm.MachineTime //nolint:staticcheck // Talos compares it too
		nm.MachineCertSANs = cm.MachineCertSANs
		nm.MachineInstall = cm.MachineInstall
		nm.MachineNetwork = cm.MachineNetwork //nolint:staticcheck // Talos compares it too
		nm.MachineSysfs = cm.MachineSysfs
		nm.MachineSysctls = cm.MachineSysctls
		nm.MachineLogging = cm.MachineLogging
		nm.MachineControlPlane = cm.MachineControlPlane
		nm.MachineKubelet = cm.MachineKubelet
		nm.MachineKernel = cm.MachineKernel
		nm.MachineRegistries = cm.MachineRegistries //nolint:staticcheck // Talos compares it too
		nm.MachinePods = cm.MachinePods
		nm.MachineSeccompProfiles = cm.MachineSeccompProfiles
		nm.MachineNodeAnnotations = cm.MachineNodeAnnotations
		nm.MachineNodeLabels = cm.MachineNodeLabels
		nm.MachineNodeTaints = cm.MachineNodeTaints
		if nf, cf := nm.MachineFeatures, cm.MachineFeatures; nf != nil && cf != nil {
			nf.KubernetesTalosAPIAccessConfig = cf.KubernetesTalosAPIAccessConfig
			nf.KubePrismSupport = cf.KubePrismSupport
			nf.HostDNSSupport = cf.HostDNSSupport
			nf.ImageCacheSupport = cf.ImageCacheSupport
			nf.FeatureNodeAddressSortAlgorithm = cf.FeatureNodeAddressSortAlgorithm
		}
	}
	if !reflect.DeepEqual(currentConfig, newConfig) {
		diff, err := configdiff.DiffConfigs(container.NewV1Alpha1(currentConfig), container.NewV1Alpha1(newConfig))
		if err != nil {
			return fmt.Errorf("error calculating diff: %w", err)
		}
		return fmt.Errorf("this config change can't be applied in immediate mode\ndiff:\n%s", diff)
	}
	return nil
}

// generateDiff is a dry run's diff of the running config against the new
// one (v1alpha1_server.go, generateDiff).
func generateDiff(current config.Provider, next config.Provider) (string, error) {
	documentsDiff, err := configdiff.DiffConfigs(current, next)
	if err != nil {
		return "", err
	}
	if documentsDiff == "" {
		documentsDiff = "No changes."
	}
	return "Config diff:\n\n" + documentsDiff, nil
}
