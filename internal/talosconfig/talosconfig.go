// Package talosconfig names the input of one node's Talos machine config
// as the program asks the provider for it, and the platform the node
// boots (metal for libvirt, nocloud for Proxmox). The configs are
// generated and validated by Talos' own machinery in the
// tools/talos-validate-* builds (internal/conformance) and, at the
// module's machinery, by tests/talosrender_test.go.
package talosconfig

// Platform is the Talos platform a node boots, as its runtime mode sees it.
type Platform string

// The platforms Milner's substrates boot.
const (
	// Metal is the libvirt boot image (metal-amd64): Talos installs to disk.
	Metal Platform = "metal"
	// Nocloud is the Proxmox boot image (nocloud-amd64): a cloud platform,
	// the image is the installed system.
	Nocloud Platform = "nocloud"
)

// Input is one node's config, as the program asks the provider for it.
type Input struct {
	// ClusterName, Endpoint and KubernetesVersion are the generator's inputs.
	ClusterName, Endpoint, KubernetesVersion string
	// Contract is the config contract (the generator's talos_version), e.g. v1.9.
	Contract string
	// MachineType is controlplane or worker.
	MachineType string
	// Patches are the node's patches in order (its own, then extra ones).
	Patches []string
	// Platform is the platform the node boots.
	Platform Platform
}
