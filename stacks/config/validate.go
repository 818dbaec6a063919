package config

import (
	"fmt"
	"github.com/milner/milner/components/vocab"
	"net/netip"
	pathpkg "path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/mod/semver"
)

// Limits on node sizes. The minimums are Talos' system requirements.
const (
	MinMemoryControlPlaneMiB = 2048
	MinMemoryWorkerMiB       = 1024
	MaxMemoryMiB             = 256 * 1024
	MaxVCPU                  = 64
	MinOSDiskGiB             = 10
	MaxOSDiskGiB             = 4096
	MaxDataDiskGiB           = 64 * 1024
	MinProxmoxVMID           = 100
	MaxProxmoxVMID           = 999999999
)

var (
	dnsLabel  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	secretKey = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)
	// contractRe is a Talos config contract: vMAJOR.MINOR.
	contractRe = regexp.MustCompile(`^v[0-9]+\.[0-9]+$`)
	uuidRe     = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// proxmoxToken matches the shape of a Proxmox VE API token: user@realm!tokenid=secret.
var proxmoxToken = regexp.MustCompile(`^[^@\s]+@[^!\s]+![^=\s]+=\S+$`)

// checkProxmoxToken reports a missing, plain-text or malformed Proxmox API
// token. The value is never echoed: it is a secret.
func checkProxmoxToken(src ConfigSource, p *problems) {
	full := Key(ProxmoxTokenKey)
	n := len(p.errs)
	checkSecret(src, ProxmoxTokenKey, "substrate kind proxmox", p)
	// A stack loaded without its passphrase has no token to check.
	if tok, _ := src.GetConfig(full); len(p.errs) == n && tok != PlaceholderSecret && !proxmoxToken.MatchString(tok) {
		p.addf(full, "is not a Proxmox VE API token of the form user@realm!tokenid=secret")
	}
}

// exactVersion reports whether v is one exact semantic version (v1.2.3 or
// 1.2.3, with an optional pre-release), not a range or a shorthand.
func exactVersion(v string) bool {
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return semver.IsValid(v) && semver.Canonical(v) == v
}

// validate checks the defaulted config and fills its parsed fields. It never
// stops at the first problem.
func (c *Config) validate(p *problems) {
	if c.StartAt == LayerApps {
		c.validateExistingCluster(p)
	} else {
		c.validateCluster(p)
		c.validateSubstrate(p)
		c.validateNetwork(p)
		c.validateNodes(p)
		c.validateOIDC(p)
	}
	c.validateStartAt(p)
	c.validateApps(p)
	c.validateAppsLayer(p)
	c.validateChartMirrors(p)
	c.validateInput(p)
	if !slices.Contains(Layers, c.StopAfter) {
		p.addf(Key("stopAfter"), "unknown layer %q (want one of %v)", c.StopAfter, Layers)
	}
}

func (c *Config) validateCluster(p *problems) {
	cl := &c.Cluster
	path := Key("cluster")
	if !dnsLabel.MatchString(cl.Name) || len(cl.Name) > 32 {
		p.addf(path+".name", "%q is not a lowercase DNS label of at most 32 characters", cl.Name)
	}
	// The supported-versions table (versions.go) decides both versions.
	row, rowErr := TalosRow(cl.TalosVersion)
	if rowErr != nil {
		p.addf(path+".talosVersion", "%v", rowErr)
	} else if w := row.NewerThanKnown(cl.TalosVersion); w != "" {
		p.warnf(path+".talosVersion", "%s", w)
	}
	switch {
	case !contractRe.MatchString(cl.ConfigContract):
		p.addf(path+".configContract", "%q is not a Talos machine-config contract like v1.12 (the Talos minor version the cluster was created with; it never changes)", cl.ConfigContract)
	case rowErr == nil && semver.Compare(cl.ConfigContract, row.Minor) > 0:
		p.addf(path+".configContract", "%s is newer than talosVersion %s: a node cannot take a config contract newer than the Talos it runs", cl.ConfigContract, cl.TalosVersion)
	case semver.Compare(cl.ConfigContract, GeneratorContract()) > 0:
		p.addf(path+".configContract", "%s is newer than the newest contract the Talos provider's machinery knows (%s, machinery %s): it would generate a %s config and call it %s; use %s",
			cl.ConfigContract, GeneratorContract(), GeneratorMachinery, GeneratorContract(), cl.ConfigContract, GeneratorContract())
	}
	switch {
	case !release(cl.KubernetesVersion):
		p.addf(path+".kubernetesVersion", "%q is not an exact Kubernetes release like v1.36.3 (no range, no pre-release)", cl.KubernetesVersion)
	case rowErr == nil:
		if err := row.SupportsKubernetes(cl.KubernetesVersion); err != nil {
			p.addf(path+".kubernetesVersion", "%v (%s)", err, SupportedVersionsFile)
		}
	}
	if cl.Endpoint != "" && !strings.HasPrefix(cl.Endpoint, "https://") {
		p.addf(path+".endpoint", "%q is not an https:// URL", cl.Endpoint)
	}
	vip, err := netip.ParseAddr(cl.VIP)
	if err != nil || !vip.Is4() {
		p.addf(path+".vip", "%q is not an IPv4 address", cl.VIP)
		return
	}
	cl.VIPAddr = vip
}

func (c *Config) validateSubstrate(p *problems) {
	s := &c.Substrate
	path := Key("substrate")
	switch s.Kind {
	case KindLibvirt:
		if s.Libvirt == nil {
			p.addf(path+".libvirt", "is required for kind libvirt")
		}
		if s.Proxmox != nil {
			p.addf(path+".proxmox", "is set but kind is libvirt")
		}
	case KindProxmox:
		if s.Proxmox == nil {
			p.addf(path+".proxmox", "is required for kind proxmox")
		}
		if s.Libvirt != nil {
			p.addf(path+".libvirt", "is set but kind is proxmox")
		}
	default:
		p.addf(path+".kind", "unknown substrate %q (want one of %v)", s.Kind, Kinds)
	}
	if lv := s.Libvirt; lv != nil {
		if !strings.Contains(lv.URI, "://") {
			p.addf(path+".libvirt.uri", "%q is not a libvirt URI like qemu:///system", lv.URI)
		}
		if lv.DomainType != "kvm" && lv.DomainType != "qemu" {
			p.addf(path+".libvirt.domainType", "unknown domain type %q (want kvm or qemu)", lv.DomainType)
		}
		switch {
		case !slices.Contains(CPUModes, lv.CPUMode):
			p.addf(path+".libvirt.cpuMode", "%q is not a CPU mode that guarantees x86-64-v2, which Talos needs to boot (want one of %v)", lv.CPUMode, CPUModes)
		case lv.CPUMode == CPUHostPassthrough && lv.DomainType == "qemu":
			p.addf(path+".libvirt.cpuMode", "%s needs KVM; with domainType qemu use %s", lv.CPUMode, CPUMaximum)
		}
		if !strings.HasPrefix(lv.PoolPath, "/") {
			p.addf(path+".libvirt.poolPath", "%q is not an absolute path", lv.PoolPath)
		}
		c.validateLibvirtAdopt(p, path+".libvirt.adopt", lv.Adopt)
	}
	if px := s.Proxmox; px != nil {
		if !strings.HasPrefix(px.Endpoint, "https://") {
			p.addf(path+".proxmox.endpoint", "%q is not an https:// URL", px.Endpoint)
		}
		required := map[string]string{
			"nodeName": px.NodeName, "osDatastore": px.OSDatastore, "dataDatastore": px.DataDatastore,
			"imageDatastore": px.ImageDatastore, "bridge": px.Bridge,
		}
		// In key order: problems come out in a stable order.
		for _, field := range sortedKeys(required) {
			if required[field] == "" {
				p.addf(path+".proxmox."+field, "is required")
			}
		}
		if !px.DiskInterface.Valid() {
			p.addf(path+".proxmox.diskInterface", "unknown disk interface %q (want one of %v)", px.DiskInterface, vocab.DiskInterfaces)
		}
		if !strings.HasPrefix(px.ImageURL, "https://") || !slices.Contains([]string{".qcow2", ".raw", ".vmdk"}, pathpkg.Ext(px.ImageURL)) {
			p.addf(path+".proxmox.imageUrl", "%q is not an https:// URL of an uncompressed disk image (.qcow2, .raw or .vmdk), as PVE's import content type needs", px.ImageURL)
		}
		c.validateProxmoxNodes(p)
		c.validateProxmoxFirstConfig(p)
	}
}

// validateProxmoxNodes checks what the Proxmox substrate derives from each
// node: its disk holder's VM id (vmId + HolderVMIDOffset) and its
// adoption id. Range and uniqueness of vmId itself are checked with the nodes.
func (c *Config) validateProxmoxNodes(p *problems) {
	vmids := map[int]int{}
	for i, n := range c.Nodes {
		vmids[n.VMID] = i
	}
	for i, n := range c.Nodes {
		np := fmt.Sprintf("%s[%d]", Key("nodes"), i)
		if n.VMID < MinProxmoxVMID || n.VMID > MaxProxmoxVMID {
			continue
		}
		h := vocab.HolderVMID(n.VMID)
		if h > MaxProxmoxVMID {
			p.addf(np+".vmId", "%d leaves no room for its disk holder VM %d (vmId + %d) below %d", n.VMID, h, vocab.HolderVMIDOffset, MaxProxmoxVMID)
		} else if j, taken := vmids[h]; taken {
			p.addf(np+".vmId", "%d's disk holder VM id %d (vmId + %d) is the VM id of nodes[%d]", n.VMID, h, vocab.HolderVMIDOffset, j)
		}
		if n.AdoptID != "" && n.AdoptID != strconv.Itoa(n.VMID) {
			p.addf(np+".adoptId", "%q is not this node's vmId %d: a Proxmox VM is adopted under its own id", n.AdoptID, n.VMID)
		}
		if n.HolderAdoptID != "" && n.HolderAdoptID != strconv.Itoa(h) {
			p.addf(np+".holderAdoptId", "%q is not this node's disk holder VM id %d (vmId + %d)", n.HolderAdoptID, h, vocab.HolderVMIDOffset)
		}
	}
	c.validateProxmoxPlacement(p)
}

func (c *Config) validateNetwork(p *problems) {
	n := &c.Network
	path := Key("network")
	if !slices.Contains(vocab.NetworkModes, n.Mode) {
		p.addf(path+".mode", "unknown network mode %q (want one of %v)", n.Mode, vocab.NetworkModes)
	}
	prefix, err := netip.ParsePrefix(n.CIDR)
	if err != nil || !prefix.Addr().Is4() || prefix.Masked() != prefix || prefix.Bits() < 8 || prefix.Bits() > 29 {
		p.addf(path+".cidr", "%q is not an IPv4 network between /8 and /29 (e.g. 10.73.0.0/24)", n.CIDR)
		return
	}
	n.Prefix = prefix
	n.GatewayAddr = prefix.Addr().Next()
	if n.Gateway != "" {
		n.GatewayAddr = c.hostAddr(p, path+".gateway", n.Gateway)
	}
	n.NameserverAddrs = []netip.Addr{n.GatewayAddr}
	if len(n.Nameservers) > 0 {
		n.NameserverAddrs = nil
		for i, s := range n.Nameservers {
			a, err := netip.ParseAddr(s)
			if err != nil {
				p.addf(fmt.Sprintf("%s.nameservers[%d]", path, i), "%q is not an IP address", s)
			}
			n.NameserverAddrs = append(n.NameserverAddrs, a)
		}
	}
	c.parseRange(p, path+".dhcpRange", n.DHCPRange)
	c.parseRange(p, path+".vipRange", n.VIPRange)
	if n.DHCPRange.Contains(n.GatewayAddr) {
		p.addf(path+".dhcpRange", "contains the gateway %s", n.GatewayAddr)
	}
	if n.DHCPRange != nil && n.VIPRange != nil && n.DHCPRange.From.IsValid() && n.VIPRange.From.IsValid() && n.DHCPRange.overlaps(n.VIPRange) {
		p.addf(path+".vipRange", "overlaps dhcpRange %s-%s", n.DHCPRange.Start, n.DHCPRange.End)
	}

	vip := c.Cluster.VIPAddr
	if !vip.IsValid() {
		return
	}
	vipPath := Key("cluster.vip")
	switch {
	case !prefix.Contains(vip):
		p.addf(vipPath, "%s is outside the node network %s", vip, prefix)
	case vip == n.GatewayAddr:
		p.addf(vipPath, "%s is the gateway", vip)
	case n.DHCPRange.Contains(vip):
		p.addf(vipPath, "%s is inside the DHCP range %s-%s, where a stray lease can take it", vip, n.DHCPRange.Start, n.DHCPRange.End)
	case n.VIPRange.Contains(vip):
		p.addf(vipPath, "%s is inside the load-balancer vipRange %s-%s, which may hand it out", vip, n.VIPRange.Start, n.VIPRange.End)
	}
}

// hostAddr parses an address that must be a usable host of the node network.
func (c *Config) hostAddr(p *problems, path, s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	prefix := c.Network.Prefix
	switch {
	case err != nil || !a.Is4():
		p.addf(path, "%q is not an IPv4 address", s)
		return netip.Addr{}
	case !prefix.IsValid():
		return a
	case !prefix.Contains(a):
		p.addf(path, "%s is outside the node network %s", a, prefix)
	case a == prefix.Addr() || a == lastAddr(prefix):
		p.addf(path, "%s is the network or broadcast address of %s", a, prefix)
	}
	return a
}

// lastAddr is the broadcast address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (c *Config) parseRange(p *problems, path string, r *RangeConfig) {
	if r == nil {
		return
	}
	r.From = c.hostAddr(p, path+".start", r.Start)
	r.To = c.hostAddr(p, path+".end", r.End)
	if r.From.IsValid() && r.To.IsValid() && r.To.Less(r.From) {
		p.addf(path, "start %s is after end %s", r.From, r.To)
		r.From, r.To = netip.Addr{}, netip.Addr{}
	}
}

func (c *Config) validateNodes(p *problems) {
	path := Key("nodes")
	if len(c.Nodes) == 0 {
		p.addf(path, "at least one node is required")
		return
	}
	names, addrs, macs, vmids := map[string]int{}, map[netip.Addr]int{}, map[string]int{}, map[int]int{}
	controlPlanes := 0
	proxmox := c.Substrate.Kind == KindProxmox
	for i := range c.Nodes {
		n := &c.Nodes[i]
		np := fmt.Sprintf("%s[%d]", path, i)
		uniqueName(p, np+".name", n.Name, "nodes", i, names)

		minMem := MinMemoryWorkerMiB
		switch n.Role {
		case vocab.RoleControlPlane:
			controlPlanes++
			minMem = MinMemoryControlPlaneMiB
		case vocab.RoleWorker:
		default:
			p.addf(np+".role", "unknown role %q (want one of %v)", n.Role, vocab.Roles)
		}
		if n.VCPU < 1 || n.VCPU > MaxVCPU {
			p.addf(np+".vcpu", "%d is outside 1..%d", n.VCPU, MaxVCPU)
		}
		switch {
		case n.MemoryMiB < minMem:
			p.addf(np+".memoryMiB", "%d is below the Talos minimum of %d for a %s", n.MemoryMiB, minMem, n.Role)
		case n.MemoryMiB > MaxMemoryMiB:
			p.addf(np+".memoryMiB", "%d is above the maximum of %d", n.MemoryMiB, MaxMemoryMiB)
		}
		if n.OSDiskGiB < MinOSDiskGiB || n.OSDiskGiB > MaxOSDiskGiB {
			p.addf(np+".osDiskGiB", "%d is outside %d..%d (Talos needs at least %d GiB)", n.OSDiskGiB, MinOSDiskGiB, MaxOSDiskGiB, MinOSDiskGiB)
		}
		if n.DataDiskGiB < 1 || n.DataDiskGiB > MaxDataDiskGiB {
			p.addf(np+".dataDiskGiB", "%d is outside 1..%d", n.DataDiskGiB, MaxDataDiskGiB)
		}

		n.Addr = c.hostAddr(p, np+".address", n.Address)
		if a := n.Addr; a.IsValid() {
			net := c.Network
			switch {
			case a == net.GatewayAddr:
				p.addf(np+".address", "%s is the gateway", a)
			case a == c.Cluster.VIPAddr:
				p.addf(np+".address", "%s is the cluster VIP", a)
			case net.DHCPRange.Contains(a):
				p.addf(np+".address", "%s is inside the DHCP range %s-%s", a, net.DHCPRange.Start, net.DHCPRange.End)
			case net.VIPRange.Contains(a):
				p.addf(np+".address", "%s is inside the vipRange %s-%s", a, net.VIPRange.Start, net.VIPRange.End)
			}
			if j, dup := addrs[a]; dup {
				p.addf(np+".address", "%s is also the address of nodes[%d]", a, j)
			} else {
				addrs[a] = i
			}
		}

		if mac, err := parseMAC(n.MAC); err != nil {
			p.addf(np+".mac", "%q is not a MAC address: %v", n.MAC, err)
		} else if mac[0]&1 == 1 {
			p.addf(np+".mac", "%s is a multicast address", mac)
		} else if j, dup := macs[mac.String()]; dup {
			p.addf(np+".mac", "%s is also the MAC of nodes[%d]", mac, j)
		} else {
			macs[mac.String()] = i
		}

		switch {
		case proxmox && (n.VMID < MinProxmoxVMID || n.VMID > MaxProxmoxVMID):
			p.addf(np+".vmId", "%d is outside the Proxmox VM id range %d..%d", n.VMID, MinProxmoxVMID, MaxProxmoxVMID)
		case proxmox:
			if j, dup := vmids[n.VMID]; dup {
				p.addf(np+".vmId", "%d is also the VM id of nodes[%d]", n.VMID, j)
			}
			vmids[n.VMID] = i
		case n.VMID != 0:
			p.addf(np+".vmId", "is only for substrate kind proxmox")
		}
		if n.AdoptID != "" && !proxmox && !uuidRe.MatchString(n.AdoptID) {
			p.addf(np+".adoptId", "%q is not a libvirt domain UUID", n.AdoptID)
		}
		if !proxmox && (n.ProxmoxNode != "" || n.HolderAdoptID != "") {
			p.addf(np, "proxmoxNode and holderAdoptId are only for substrate kind proxmox")
		}
	}
	switch {
	case controlPlanes == 0:
		p.addf(path, "no node has role %s; a cluster needs at least one", vocab.RoleControlPlane)
	case controlPlanes%2 == 0:
		p.warnf(path, "%d control planes: etcd's quorum is %d, so it survives the loss of %d, no more than %d control planes do", controlPlanes, controlPlanes/2+1, (controlPlanes-1)/2, controlPlanes-1)
	}
}

// uniqueName checks the name of list[i]: a lowercase DNS label that no
// earlier entry of the list (seen: name → index) has.
func uniqueName(p *problems, path, name, list string, i int, seen map[string]int) {
	if !dnsLabel.MatchString(name) {
		p.addf(path, "%q is not a lowercase DNS label", name)
	} else if j, dup := seen[name]; dup {
		p.addf(path, "%q is also the name of %s[%d]", name, list, j)
	} else {
		seen[name] = i
	}
}

func (c *Config) validateApps(p *problems) {
	path := Key("apps")
	// On an existing cluster (startAt: apps) its nodes are not Milner's to check.
	if len(c.Apps) > 0 && c.Declares(LayerTalos) && c.Declares(LayerApps) && !c.schedulable() {
		p.addf(path, "%d apps but no node takes workloads: add a worker or set %s to true", len(c.Apps), Key("cluster.allowSchedulingOnControlPlanes"))
	}
	names := map[string]int{}
	for i := range c.Apps {
		a := &c.Apps[i]
		ap := fmt.Sprintf("%s[%d]", path, i)
		uniqueName(p, ap+".name", a.Name, "apps", i, names)
		if !dnsLabel.MatchString(a.ReleaseName) || len(a.ReleaseName) > 53 {
			p.addf(ap+".releaseName", "%q is not a Helm release name (a DNS label of at most 53 characters)", a.ReleaseName)
		}
		if !dnsLabel.MatchString(a.Namespace) {
			p.addf(ap+".namespace", "%q is not a lowercase DNS label", a.Namespace)
		}
		validateChart(p, ap+".chart", c.dir, &a.Chart)
		for _, vp := range sortedKeys(a.SecretValues) {
			if vp == "" || strings.HasPrefix(vp, ".") || strings.HasSuffix(vp, ".") || strings.Contains(vp, "..") {
				p.addf(ap+".secretValues", "%q is not a dotted value path", vp)
			}
			if sk := a.SecretValues[vp]; !secretKey.MatchString(sk) {
				p.addf(fmt.Sprintf("%s.secretValues[%s]", ap, vp), "%q is not a config key name", sk)
			}
		}
	}
	for i, a := range c.Apps {
		for _, old := range a.PreviousNames {
			if j, taken := names[old]; taken {
				p.addf(fmt.Sprintf("%s[%d].previousNames", path, i), "%q is the current name of apps[%d]", old, j)
			}
		}
	}
}

// schedulable reports whether any node takes workloads: a worker, or a
// control plane that allows scheduling.
func (c *Config) schedulable() bool {
	for _, n := range c.Nodes {
		if n.Role == vocab.RoleWorker {
			return true
		}
	}
	allow := c.Cluster.AllowSchedulingOnControlPlanes
	return allow != nil && *allow && len(c.Nodes) > 0
}

// sortedKeys returns a map's keys in order, for stable messages and graphs.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// validateLibvirtAdopt checks milner:substrate.libvirt.adopt: each key is
// the logical name of a pool, network or volume the stack declares, each id
// the kind the provider imports by (a pool's or network's UUID, a volume's
// key: its absolute path).
func (c *Config) validateLibvirtAdopt(p *problems, path string, adopt map[string]string) {
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
	}
	known := vocab.LibvirtAdoptable(c.Cluster.Name, names)
	for _, logical := range sortedKeys(adopt) {
		id := adopt[logical]
		switch {
		case !slices.Contains(known, logical):
			p.addf(path+"."+logical, "is not a pool, network or volume of this stack (want one of %v; domains are adopted by nodes[i].adoptId)", known)
		case logical == known[0] || logical == known[1]: // the pool and the network
			if !uuidRe.MatchString(id) {
				p.addf(path+"."+logical, "%q is not a libvirt UUID", id)
			}
		case !strings.HasPrefix(id, "/") || strings.ContainsFunc(id, unicode.IsControl) || strings.Contains(id, ".."):
			p.addf(path+"."+logical, "%q is not a volume key (the volume's absolute path)", id)
		}
	}
}
