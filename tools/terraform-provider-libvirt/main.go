// Command terraform-provider-libvirt is dmacvicar/terraform-provider-libvirt
// v0.8.3 (the provider Milner's bridged libvirt plugin wraps), built from the
// Go module proxy for the Terraform side of bench/: Terraform cannot download
// providers here, so bench/run.sh wires this binary in with dev_overrides.
// It is upstream's main.go, unchanged.
package main

import (
	"github.com/dmacvicar/terraform-provider-libvirt/libvirt"
	"github.com/hashicorp/terraform-plugin-sdk/v2/plugin"
)

func main() {
	defer libvirt.CleanupLibvirtConnections()

	plugin.Serve(&plugin.ServeOpts{
		ProviderFunc: libvirt.Provider,
	})
}
