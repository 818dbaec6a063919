// Package wire is what `talos-validate-<version> generate|validate` read on
// stdin and write on stdout: a JSON array of Node.
package wire

// Node is one node's config, in and out.
type Node struct {
	// Name is the node's name.
	Name string `json:"name"`
	// ClusterName, Endpoint, KubernetesVersion, Contract (the generator's
	// talos_version), MachineType and Patches are generate's input.
	ClusterName       string   `json:"clusterName,omitempty"`
	Endpoint          string   `json:"endpoint,omitempty"`
	KubernetesVersion string   `json:"kubernetesVersion,omitempty"`
	Contract          string   `json:"contract,omitempty"`
	MachineType       string   `json:"machineType,omitempty"`
	Patches           []string `json:"patches,omitempty"`
	// Platform is metal (libvirt) or nocloud (Proxmox).
	Platform string `json:"platform"`
	// Config is generate's output and validate's input.
	Config string `json:"config,omitempty"`
	// Error says why no config could be generated or loaded.
	Error string `json:"error,omitempty"`
	// Refused is the validator's verdict on Config ("" when accepted).
	Refused string `json:"refused,omitempty"`
	// Warnings are the validator's warnings.
	Warnings []string `json:"warnings,omitempty"`
}
