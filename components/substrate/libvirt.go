package substrate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/milner/milner/components/vocab"
	"net/netip"
	"slices"
	"strings"

	"github.com/pulumi/pulumi-libvirt/sdk/go/libvirt"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/components/lifecycle"
)

// LibvirtType is the type token of the libvirt substrate component. It is part
// of every child's URN: changing it orphans the whole substrate in state.
const LibvirtType = "milner:components:LibvirtSubstrate"

// LibvirtDomainIgnoredOnAdopt lists the domain inputs that
// terraform-provider-libvirt 0.8.x never fills on read. An imported domain
// would otherwise always plan a replace (and the engine refuses a replace on
// import), so adopted domains ignore exactly these; 0.9.6+ reads them.
// bootDevices and consoles: seen unread on a real import (tests/integration
// TestAdoptDomain), so they are on the list too.
var LibvirtDomainIgnoredOnAdopt = []string{"type", "fwCfgName", "coreosIgnition", "qemuAgent", "bootDevices", "consoles"}

// LibvirtDomainNeverReadBack lists the domain inputs that
// terraform-provider-libvirt 0.8.x reads back empty on every domain (the NIC's
// addresses and hostname come from DHCP leases, which a node with a static
// Talos address never takes). Without ignoring them, every preview after an
// up would plan a replace of every domain. They still set the network's DHCP
// reservation and DNS entry when the domain is created; a changed address
// reaches a running node through its Talos config, not a domain replace.
// The paths name the one NIC by index: the bridged provider matches ignored
// paths exactly, without wildcards.
var LibvirtDomainNeverReadBack = []string{"networkInterfaces[0].addresses", "networkInterfaces[0].hostname"}

// LibvirtDomainKeptAsCreated lists the domain inputs written only when a
// domain is created: the owner tag (OwnerTag) in its description. Domains
// created before the tag existed, or adopted, keep their description, since
// any domain diff is a replace (ReplaceOnChanges "*").
var LibvirtDomainKeptAsCreated = []string{"description"}

// providerMode maps a network mode to terraform-provider-libvirt's name for it.
func providerMode(m vocab.NetworkMode) string {
	if m == vocab.NetworkIsolated {
		return "none"
	}
	return string(m)
}

// LibvirtArgs configures a libvirt substrate.
type LibvirtArgs struct {
	// URI is the libvirt connection URI, e.g. qemu:///system.
	URI string
	// DomainType is the libvirt domain type: "kvm", or "qemu" where there is no KVM.
	DomainType string
	// CPUMode is every domain's libvirt CPU mode; the stack config accepts only modes that guarantee x86-64-v2.
	CPUMode string
	// PoolPath is the host directory of the storage pool.
	PoolPath string
	// BootImage is the path or URL of the Talos disk image that seeds new OS disks.
	BootImage string
	// NetworkMode is NAT for a workstation, isolated for tests.
	NetworkMode vocab.NetworkMode
	// CIDR is the node network; libvirt takes its first host address.
	CIDR netip.Prefix
	// DHCPStart and DHCPEnd bound the addresses handed to MACs without a
	// reservation; when unset, libvirt serves the whole network (.2 up).
	DHCPStart, DHCPEnd netip.Addr
	// Nodes are the nodes to create, in config order.
	Nodes []NodeSpec
	// DNSHosts are names the network's DNS (libvirt's dnsmasq on the
	// network's first address) answers, in order: the apps' host names at
	// their load-balancer addresses.
	DNSHosts []DNSHost
	// Adopt maps the logical name of an object other than a domain (see
	// vocab.LibvirtAdoptable) to the id of the live object it takes over: a pool's
	// or network's UUID, a volume's key (its path). Domains are adopted by
	// NodeSpec.AdoptID.
	Adopt map[string]string
	// Identify returns the identity of the file at a volume's path, as the
	// host tells it ("" when it tells none), recorded in the component's
	// VolumeIdentities output once the volume is created or imported: a
	// dir pool's volume key is its path, so a volume deleted and recreated
	// there has the same key, and only this tells the two apart. nil where
	// the volumes' files are not on the machine the program runs on (a
	// remote URI) and in tests: nothing is recorded.
	Identify func(path string) string
	// Hooks are the run's lifecycle hooks: every persistent object (pool,
	// network, boot media, volumes) is bound to lifecycle.KeepPersistent.
	Hooks *lifecycle.Hooks
}

// DNSHost is one name the libvirt network's DNS answers, and its address.
type DNSHost struct {
	Hostname string
	IP       netip.Addr
}

// adopt returns the options that import the live object args.Adopt names
// for logical, or none. notReadBack are the inputs the provider's Read never
// sets (terraform-provider-libvirt v0.8.3 libvirt/resource_libvirt_*.go):
// the imported state cannot hold them, so without ignoring them every
// import would plan a replacement instead.
func (a *LibvirtArgs) adopt(logical string, notReadBack ...string) []pulumi.ResourceOption {
	id, ok := a.Adopt[logical]
	if !ok {
		return nil
	}
	opts := []pulumi.ResourceOption{pulumi.Import(pulumi.ID(id))}
	if len(notReadBack) > 0 {
		opts = append(opts, pulumi.IgnoreChanges(notReadBack))
	}
	return opts
}

// VolumeIdentities is the component output that maps each volume's
// logical name to the identity LibvirtArgs.Identify gave its file ("" none
// told): what the state records of which file each volume is. Its name is
// a state contract (the substrate guard reads it from state).
const VolumeIdentities = "volumeIdentities"

// Libvirt is a substrate of libvirt domains on one host.
type Libvirt struct {
	pulumi.ResourceState

	// PoolName is the libvirt name of the storage pool.
	PoolName pulumi.StringOutput `pulumi:"poolName"`
	// NetworkID is the libvirt UUID of the node network.
	NetworkID pulumi.IDOutput `pulumi:"networkId"`

	nodes []Node
}

var _ Substrate = (*Libvirt)(nil)

// Nodes returns the facts of every node, in config order.
func (l *Libvirt) Nodes() []Node { return l.nodes }

// NewLibvirt creates the pool, network, boot media and every node's volumes
// and domain. name is the cluster name; every libvirt object is named after it.
func NewLibvirt(ctx *pulumi.Context, name string, args *LibvirtArgs, opts ...pulumi.ResourceOption) (*Libvirt, error) {
	l := &Libvirt{}
	if err := ctx.RegisterComponentResource(LibvirtType, name, l, opts...); err != nil {
		return nil, err
	}
	prov, err := libvirt.NewProvider(ctx, name+"-libvirt", &libvirt.ProviderArgs{
		Uri: pulumi.String(args.URI),
	}, pulumi.Parent(l))
	if err != nil {
		return nil, fmt.Errorf("libvirt substrate %q: provider: %w", name, err)
	}
	// Every child is parented to the component and talks to this one provider.
	child := []pulumi.ResourceOption{pulumi.Parent(l), pulumi.Provider(prov)}

	// Pool and network have no real in-place delta and carry every node:
	// protected, so no plan can delete or replace them.
	pool, err := libvirt.NewPool(ctx, name+vocab.PoolSuffix, &libvirt.PoolArgs{
		Name: pulumi.String(name),
		Type: pulumi.String("dir"),
		Target: &libvirt.PoolTargetArgs{
			Path: pulumi.String(args.PoolPath),
		},
	}, slices.Concat(child, []pulumi.ResourceOption{pulumi.Protect(true), args.Hooks.Persistent()}, args.adopt(name+vocab.PoolSuffix))...)
	if err != nil {
		return nil, fmt.Errorf("libvirt substrate %q: pool: %w", name, err)
	}
	netArgs := &libvirt.NetworkArgs{
		Name:      pulumi.String(name),
		Bridge:    pulumi.String(BridgeName(name)),
		Mode:      pulumi.String(providerMode(args.NetworkMode)),
		Addresses: pulumi.StringArray{pulumi.String(args.CIDR.String())},
		Autostart: pulumi.Bool(true),
		Dhcp:      &libvirt.NetworkDhcpArgs{Enabled: pulumi.Bool(true)},
		// An isolated network answers only its own names; a NAT network
		// forwards the rest upstream so nodes can pull images.
		Dns: &libvirt.NetworkDnsArgs{Enabled: pulumi.Bool(true), LocalOnly: pulumi.Bool(args.NetworkMode == vocab.NetworkIsolated), Hosts: dnsHosts(args.DNSHosts)},
	}
	if args.DHCPStart.IsValid() && args.DHCPEnd.IsValid() {
		netArgs.Xml = &libvirt.NetworkXmlArgs{Xslt: pulumi.String(dhcpRangeXSLT(args.DHCPStart, args.DHCPEnd))}
	}
	// dns.hosts is the one part of dns an update changes in place
	// (terraform-provider-libvirt v0.8.3 libvirt/resource_libvirt_network.go:
	// "hosts" is not ForceNew; resourceLibvirtNetworkUpdate calls
	// updateDNSHosts, network_dns.go, which adds and deletes each changed
	// <host> with virNetworkUpdate on the live network and its config), so
	// adding or moving an app's name never replaces the protected network.
	// Read never sets xml (the XSLT is applied once, at create), sets mode
	// only from a <forward> element (an isolated network has none), and
	// dns.enabled only when the XML says so explicitly
	// (resource_libvirt_network.go resourceLibvirtNetworkRead).
	network, err := libvirt.NewNetwork(ctx, name+vocab.NetSuffix, netArgs,
		slices.Concat(child, []pulumi.ResourceOption{pulumi.Protect(true), args.Hooks.Persistent()}, args.adopt(name+vocab.NetSuffix, "xml", "mode", "dns"))...)
	if err != nil {
		return nil, fmt.Errorf("libvirt substrate %q: network: %w", name, err)
	}
	// The boot media only seeds new OS disks. Its source is ignored after
	// creation so that a Talos version or image bump never replaces it (and
	// through it every OS disk): running nodes upgrade in place through Talos.
	boot, err := libvirt.NewVolume(ctx, name+vocab.BootSuffix, &libvirt.VolumeArgs{
		Name:   pulumi.String(name + "-boot.qcow2"),
		Pool:   pool.Name,
		Source: pulumi.String(args.BootImage),
		Format: pulumi.String("qcow2"),
	}, slices.Concat(child, []pulumi.ResourceOption{pulumi.Protect(true), args.Hooks.Persistent(), pulumi.IgnoreChanges([]string{"source"})}, args.adopt(name+vocab.BootSuffix))...)
	if err != nil {
		return nil, fmt.Errorf("libvirt substrate %q: boot media: %w", name, err)
	}

	volumes := map[string]*libvirt.Volume{name + vocab.BootSuffix: boot}
	for _, spec := range args.Nodes {
		n, err := newLibvirtNode(ctx, name, spec, args, pool, network, boot, child, volumes)
		if err != nil {
			return nil, fmt.Errorf("libvirt substrate %q: node %q: %w", name, spec.Name, err)
		}
		l.nodes = append(l.nodes, n)
	}

	l.PoolName = pool.Name
	l.NetworkID = network.ID()
	outputs := pulumi.Map{"poolName": l.PoolName, "networkId": l.NetworkID}
	for _, n := range l.nodes {
		outputs[n.Name+"DomainId"] = n.MachineID
	}
	if args.Identify != nil {
		outputs[VolumeIdentities] = identities(volumes, args.Identify)
	}
	if err := ctx.RegisterResourceOutputs(l, outputs); err != nil {
		return nil, err
	}
	return l, nil
}

// identities are the volumes' file identities by logical name, each read
// once its volume's key (path) is known: after its create or import in an
// update; in a preview, now for a volume already in state (unknown for
// one the preview creates), so the plan holds what the update records.
func identities(volumes map[string]*libvirt.Volume, identify func(string) string) pulumi.StringMap {
	out := pulumi.StringMap{}
	for logical, v := range volumes {
		out[logical] = v.ID().ApplyT(func(id pulumi.ID) string { return identify(string(id)) }).(pulumi.StringOutput)
	}
	return out
}

// newLibvirtNode creates one node's OS volume, data volume and domain, and
// adds the volumes to volumes by logical name.
func newLibvirtNode(ctx *pulumi.Context, cluster string, spec NodeSpec, args *LibvirtArgs,
	pool *libvirt.Pool, network *libvirt.Network, boot *libvirt.Volume, child []pulumi.ResourceOption,
	volumes map[string]*libvirt.Volume,
) (Node, error) {
	base := cluster + "-" + spec.Name
	// Disks outlive the disposable domain: separate resources, protected.
	os, err := libvirt.NewVolume(ctx, base+vocab.OSSuffix, &libvirt.VolumeArgs{
		Name:         pulumi.String(base + "-os.qcow2"),
		Pool:         pool.Name,
		BaseVolumeId: boot.ID(),
		Size:         pulumi.Int(spec.OSDiskGiB * gib),
		Format:       pulumi.String("qcow2"),
		// Read never sets base_volume_id (the backing file is not read back).
	}, slices.Concat(child, []pulumi.ResourceOption{pulumi.Protect(true), args.Hooks.Persistent(),
		// Replaced only by `milner up --replace <node> --os-disk` (protected
		// otherwise): the new volume has the old one's libvirt name and path,
		// so a create-before-delete would delete the new file with the old
		// volume (seen on the real engine: tests/integration
		// TestMilnerOSDiskReplace).
		pulumi.DeleteBeforeReplace(true)}, args.adopt(base+vocab.OSSuffix, "baseVolumeId"))...)
	if err != nil {
		return Node{}, fmt.Errorf("os volume: %w", err)
	}
	data, err := libvirt.NewVolume(ctx, base+vocab.DataSuffix, &libvirt.VolumeArgs{
		Name:   pulumi.String(base + "-data.qcow2"),
		Pool:   pool.Name,
		Size:   pulumi.Int(spec.DataDiskGiB * gib),
		Format: pulumi.String("qcow2"),
	}, slices.Concat(child, []pulumi.ResourceOption{pulumi.Protect(true), args.Hooks.Persistent()}, args.adopt(base+vocab.DataSuffix))...)
	if err != nil {
		return Node{}, fmt.Errorf("data volume: %w", err)
	}
	volumes[base+vocab.OSSuffix], volumes[base+vocab.DataSuffix] = os, data

	// The domain is the one disposable resource: any change to it is honestly
	// a recreation, and the old one must be gone before the new one takes its
	// name, MAC and disks.
	domainOpts := append(child,
		pulumi.ReplaceOnChanges([]string{"*"}),
		pulumi.DeleteBeforeReplace(true),
		pulumi.IgnoreChanges(LibvirtDomainNeverReadBack),
		pulumi.IgnoreChanges(LibvirtDomainKeptAsCreated),
	)
	if spec.AdoptID != "" {
		domainOpts = append(domainOpts,
			pulumi.Import(pulumi.ID(spec.AdoptID)),
			pulumi.IgnoreChanges(LibvirtDomainIgnoredOnAdopt),
		)
	}
	domain, err := libvirt.NewDomain(ctx, base, &libvirt.DomainArgs{
		// An explicit, stable name: a domain left defined by a crash is found
		// by name and adopted, never silently duplicated.
		Name:        pulumi.String(base),
		Description: pulumi.String(OwnerTag(ctx.Project(), ctx.Stack())),
		Type:        pulumi.String(args.DomainType),
		// A CPU Talos boots on: x86-64-v2 at least (CPUMode above).
		Cpu:       &libvirt.DomainCpuArgs{Mode: pulumi.String(args.CPUMode)},
		Vcpu:      pulumi.Int(spec.VCPU),
		Memory:    pulumi.Int(spec.MemoryMiB),
		Running:   pulumi.Bool(true),
		Autostart: pulumi.Bool(true),
		Disks: libvirt.DomainDiskArray{
			&libvirt.DomainDiskArgs{VolumeId: os.ID()},
			&libvirt.DomainDiskArgs{VolumeId: data.ID()},
		},
		NetworkInterfaces: libvirt.DomainNetworkInterfaceArray{
			&libvirt.DomainNetworkInterfaceArgs{
				NetworkId: network.ID(),
				Mac:       pulumi.String(strings.ToUpper(spec.MAC)),
				Hostname:  pulumi.String(spec.Name),
				Addresses: pulumi.StringArray{pulumi.String(spec.Address.String())},
			},
		},
		BootDevices: libvirt.DomainBootDeviceArray{
			&libvirt.DomainBootDeviceArgs{Devs: pulumi.StringArray{pulumi.String("hd")}},
		},
		Consoles: libvirt.DomainConsoleArray{
			&libvirt.DomainConsoleArgs{Type: pulumi.String("pty"), TargetPort: pulumi.String("0"), TargetType: pulumi.String("serial")},
		},
	}, domainOpts...)
	if err != nil {
		return Node{}, fmt.Errorf("domain: %w", err)
	}
	return Node{
		Name:        spec.Name,
		Role:        spec.Role,
		Address:     spec.Address,
		InstallDisk: "/dev/vda",
		DataDisk:    "/dev/vdb",
		MachineID:   domain.ID(),
		VM:          domain,
	}, nil
}

// BridgeName is the host bridge of a cluster's network: explicit and derived
// from the cluster name, because libvirt's automatic virbrN names collide when
// two networks are created at the same moment. Linux allows 15 characters.
func BridgeName(cluster string) string {
	sum := sha256.Sum256([]byte(cluster))
	return "mlnr" + hex.EncodeToString(sum[:])[:10]
}

// dhcpRangeXSLT narrows the DHCP range terraform-provider-libvirt derives
// from the CIDR (all of .2 to .254) to the configured one, so that node
// reservations and VIPs can sit outside it.
func dhcpRangeXSLT(start, end netip.Addr) string {
	return fmt.Sprintf(`<?xml version="1.0"?>
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output omit-xml-declaration="yes" indent="yes"/>
  <xsl:template match="node()|@*">
    <xsl:copy><xsl:apply-templates select="node()|@*"/></xsl:copy>
  </xsl:template>
  <xsl:template match="/network/ip/dhcp/range/@start"><xsl:attribute name="start">%s</xsl:attribute></xsl:template>
  <xsl:template match="/network/ip/dhcp/range/@end"><xsl:attribute name="end">%s</xsl:attribute></xsl:template>
</xsl:stylesheet>
`, start, end)
}

// dnsHosts is the network's dns.hosts: nil when there are none, so a
// network without names keeps the inputs it always had.
func dnsHosts(hosts []DNSHost) libvirt.NetworkDnsHostArray {
	var out libvirt.NetworkDnsHostArray
	for _, h := range hosts {
		out = append(out, libvirt.NetworkDnsHostArgs{Hostname: pulumi.String(h.Hostname), Ip: pulumi.String(h.IP.String())})
	}
	return out
}
