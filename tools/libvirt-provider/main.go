// Command pulumi-resource-libvirt is a Pulumi resource provider bridged from
// github.com/dmacvicar/terraform-provider-libvirt. It stands in for the
// pulumi-libvirt v0.5.4 plugin, which cannot be downloaded here: tokens,
// property names (the bridge's defaults) and auto-naming match that release so
// that github.com/pulumi/pulumi-libvirt/sdk v0.5.4 drives it unchanged.
package main

import (
	"github.com/dmacvicar/terraform-provider-libvirt/libvirt"
	"github.com/pulumi/pulumi-terraform-bridge/v3/pkg/tfbridge"
	shimv2 "github.com/pulumi/pulumi-terraform-bridge/v3/pkg/tfshim/sdk-v2"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
)

// version must equal the SDK's plugin request (pulumi-plugin.json of
// github.com/pulumi/pulumi-libvirt/sdk v0.5.4).
const version = "0.5.4"

// A package schema is only needed for SDK generation; CRUD works without it.
var pulumiSchema = []byte(`{"name":"libvirt","version":"` + version + `"}`)

func res(name string) *tfbridge.ResourceInfo {
	return &tfbridge.ResourceInfo{Tok: tokens.Type("libvirt:index/" + lowerFirst(name) + ":" + name)}
}

func fn(name string) *tfbridge.DataSourceInfo {
	return &tfbridge.DataSourceInfo{Tok: tokens.ModuleMember("libvirt:index/" + name + ":" + name)}
}

func lowerFirst(s string) string { return string(s[0]|0x20) + s[1:] }

func providerInfo() tfbridge.ProviderInfo {
	prov := tfbridge.ProviderInfo{
		P:       shimv2.NewProvider(libvirt.Provider()),
		Name:    "libvirt",
		Version: version,
		Config: map[string]*tfbridge.SchemaInfo{
			"uri": {Default: &tfbridge.DefaultInfo{EnvVars: []string{"LIBVIRT_DEFAULT_URI"}}},
		},
		// Same tokens as pulumi-libvirt's provider/resources.go.
		Resources: map[string]*tfbridge.ResourceInfo{
			"libvirt_domain":         res("Domain"),
			"libvirt_volume":         res("Volume"),
			"libvirt_network":        res("Network"),
			"libvirt_pool":           res("Pool"),
			"libvirt_cloudinit_disk": res("CloudInitDisk"),
			"libvirt_ignition":       res("Ignition"),
			"libvirt_combustion":     res("Combustion"),
		},
		DataSources: map[string]*tfbridge.DataSourceInfo{
			"libvirt_network_dns_host_template":        fn("getNetworkDnsHostTemplate"),
			"libvirt_network_dns_srv_template":         fn("getNetworkDnsSrvTemplate"),
			"libvirt_network_dnsmasq_options_template": fn("getNetworkDnsmasqOptionsTemplate"),
			"libvirt_node_info":                        fn("getNodeInfo"),
			"libvirt_node_device_info":                 fn("getNodeDeviceInfo"),
			"libvirt_node_devices":                     fn("getNodeDevices"),
		},
	}
	// pulumi-libvirt auto-names every `name` input (e.g. "vol-1a2b3c4"), so
	// an omitted name behaves the same as with the published plugin.
	prov.SetAutonaming(255, "-")
	return prov
}

func main() {
	tfbridge.Main("libvirt", version, providerInfo(), pulumiSchema)
}
