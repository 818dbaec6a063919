package config

// The network's shape and the stack's identities (issue #33): values each
// valid alone that together make a cluster that cannot work, or objects
// that would be one object twice. Each class is one rule below; each
// refusal names its config path.

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/milner/milner/components/vocab"
)

// Talos' default pod and service networks (machinery v1.11.5
// constants/constants.go:915 DefaultIPv4PodNet and :918
// DefaultIPv4ServiceNet). Milner never overrides them
// (cluster.network.podSubnets/serviceSubnets), so a node network that
// overlaps them routes node traffic into the cluster's own overlay.
var (
	TalosPodNet     = netip.MustParsePrefix("10.244.0.0/16")
	TalosServiceNet = netip.MustParsePrefix("10.96.0.0/12")
	loopbackNet     = netip.MustParsePrefix("127.0.0.0/8")
)

// validateShape runs the checks of this file; validateInput calls it.
func (c *Config) validateShape(p *problems) {
	if c.StartAt == LayerApps {
		c.checkGeneratedNames(p)
		return
	}
	c.checkEndpoint(p)
	c.checkNodeNetwork(p)
	c.checkLibvirtNetwork(p)
	c.checkNameserversNotVIP(p)
	c.checkMACs(p)
	c.checkAdoptedOnce(p)
	c.checkGeneratedNames(p)
}

// checkEndpoint: the Kubernetes API endpoint is where every kubeconfig and
// every node's kubelet goes. An address must be the VIP or in the node
// network (nothing else answers for this cluster); a URL carrying
// credentials, a path or a query is not an API server's address; the port
// must be a port. A DNS name cannot be checked offline and is accepted.
func (c *Config) checkEndpoint(p *problems) {
	ep := c.Cluster.Endpoint
	at := Key("cluster.endpoint")
	if ep == "" || !strings.HasPrefix(ep, "https://") {
		return // the default is the VIP; validate.go reports a non-https URL.
	}
	u, err := url.Parse(ep)
	switch {
	case err != nil || u.Host == "":
		p.addf(at, "%q is not a URL with a host", ep)
		return
	case u.User != nil:
		p.addf(at, "%q carries credentials; the endpoint is an address, credentials live in the kubeconfig", redactUserinfo(u))
		return
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "":
		p.addf(at, "%q has a path, query or fragment; the API server is addressed by host and port only", ep)
		return
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			p.addf(at, "%q has no valid port", ep)
			return
		}
	}
	a, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return // a DNS name
	}
	vip, prefix := c.Cluster.VIPAddr, c.Network.Prefix
	if a != vip && prefix.IsValid() && !prefix.Contains(a) {
		p.addf(at, "%s is neither the VIP %s nor in the node network %s: no node answers there", a, vip, prefix)
	}
}

// redactUserinfo prints a URL with its password masked.
func redactUserinfo(u *url.URL) string {
	c := *u
	if _, set := c.User.Password(); set {
		c.User = url.UserPassword(c.User.Username(), "xxxxx")
	}
	return c.String()
}

// checkNodeNetwork refuses a node network that overlaps Talos' pod or
// service network (routes to nodes and to pods would be the same routes)
// or loopback (no node can use it).
func (c *Config) checkNodeNetwork(p *problems) {
	prefix := c.Network.Prefix
	if !prefix.IsValid() {
		return
	}
	for _, r := range []struct {
		net  netip.Prefix
		what string
	}{
		{TalosPodNet, "Talos' pod network"},
		{TalosServiceNet, "Talos' service network"},
		{loopbackNet, "the loopback network"},
	} {
		if prefix.Overlaps(r.net) {
			p.addf(Key("network")+".cidr", "%s overlaps %s %s; pick a node network outside it (e.g. 10.73.0.0/24)", prefix, r.what, r.net)
		}
	}
}

// libvirtHostAddr is the address libvirt gives the host's end of the
// network's bridge: its first host address (terraform-provider-libvirt
// v0.8.3 libvirt/network.go getNetworkIPConfig: "assign the .1 to the host
// interface"). It is the nodes' only gateway and DNS server there.
func libvirtHostAddr(prefix netip.Prefix) netip.Addr { return prefix.Masked().Addr().Next() }

// checkLibvirtNetwork: on libvirt the host is the network's first host
// address whatever network.gateway says, and without network.dhcpRange the
// provider leases every address from the second host address to the last
// before broadcast (same function: "then skip the .1", "and skip the .255"),
// the VIP and load-balancer VIPs included. Proxmox ignores network.mode.
func (c *Config) checkLibvirtNetwork(p *problems) {
	n := c.Network
	np := Key("network")
	if c.Substrate.Kind == KindProxmox && n.Mode != vocab.NetworkNAT {
		// applyDefaults sets nat; anything else was written and would be ignored.
		p.addf(np+".mode", "%q is a libvirt setting: a Proxmox node's network is its bridge's; remove it", n.Mode)
	}
	if c.Substrate.Kind != KindLibvirt || !n.Prefix.IsValid() {
		return
	}
	c.checkTimeSource(p)
	host := libvirtHostAddr(n.Prefix)
	if n.GatewayAddr.IsValid() && n.GatewayAddr != host {
		p.addf(np+".gateway", "%s is not %s, the address libvirt gives the host on this network (its first host address): nothing would route there; remove gateway or set it to %s", n.GatewayAddr, host, host)
	}
	if n.DHCPRange == nil {
		pool := &RangeConfig{From: host.Next(), To: lastAddr(n.Prefix).Prev()}
		var leased []string
		if pool.Contains(c.Cluster.VIPAddr) {
			leased = append(leased, "the VIP "+c.Cluster.VIPAddr.String())
		}
		if n.VIPRange != nil && pool.overlaps(n.VIPRange) {
			leased = append(leased, "the vipRange")
		}
		for i, node := range c.Nodes {
			if pool.Contains(node.Addr) {
				leased = append(leased, fmt.Sprintf("nodes[%d]'s address %s", i, node.Addr))
			}
		}
		if len(leased) > 0 {
			p.addf(np+".dhcpRange", "is not set, so libvirt leases %s-%s to any MAC, including %s; set a range clear of them", pool.From, pool.To, strings.Join(leased, ", "))
		}
	}
}

// checkTimeSource: an isolated network forwards nothing off the host, and
// Milner sets no machine.time, so Talos asks its default time server
// (time.cloudflare.com, machinery constants.DefaultNTPServer) and never
// hears back. Talos marks its time synced only when its time source
// answers, or once machine.time.bootTimeout has passed, which is unset by
// default (v1.13.9 internal/app/machined/pkg/controllers/time/sync.go);
// etcd and the kubelet wait for that (system/services/etcd.go,
// kubelet.go: timeresource.NewSyncCondition), and Bootstrap answers "time
// is not in sync yet" (v1alpha1_server.go), which the provider retries
// until its 10-minute timeout. A warning, not a refusal: the host may
// serve NTP on the network's host address, which config cannot see, and
// the integration tests run Talos API doubles there.
func (c *Config) checkTimeSource(p *problems) {
	if c.Network.Mode != vocab.NetworkIsolated || !c.Declares(LayerTalos) {
		return
	}
	p.warnf(Key("network")+".mode", "isolated: the nodes reach no time server (Milner sets no machine.time, so Talos asks time.cloudflare.com, off this network), and Talos starts etcd and the kubelet, and answers Bootstrap, only once its time is in sync: the up fails after the provider's 10 minutes of \"time is not in sync yet\" unless this host serves NTP at %s; use mode nat, or stopAfter: substrate", libvirtHostAddr(c.Network.Prefix))
}

// checkNameserversNotVIP: the VIP is the API server's address, not a DNS
// server; a node asking it for names gets no answer.
func (c *Config) checkNameserversNotVIP(p *problems) {
	vip := c.Cluster.VIPAddr
	for i, a := range c.Network.NameserverAddrs {
		if vip.IsValid() && a == vip && i < len(c.Network.Nameservers) {
			p.addf(fmt.Sprintf("%s.nameservers[%d]", Key("network"), i), "%s is the cluster VIP (the Kubernetes API), not a DNS server", a)
		}
	}
}

// ProxmoxOUI is the prefix Proxmox VE gives the NICs it generates
// (datacenter.cfg mac_prefix, default BC:24:11, Proxmox's registered OUI).
var ProxmoxOUI = [3]byte{0xbc, 0x24, 0x11}

// checkMACs refuses a node MAC no NIC can use: all zeros; a universally
// administered address (a vendor's, which some real NIC on the LAN may
// hold) other than Proxmox's own prefix on Proxmox; and on libvirt a first
// byte of 0xfe, which libvirt reserves for the host side of a tap device
// and refuses when the domain starts (libvirt src/util/virnetdevtap.c
// virNetDevTapCreateInBridgePort: "Unable to use MAC address starting with
// reserved value 0xFE"). Multicast is refused in validate.go.
func (c *Config) checkMACs(p *problems) {
	for i, n := range c.Nodes {
		mac, err := net.ParseMAC(n.MAC)
		if err != nil || len(mac) != 6 || mac[0]&1 == 1 {
			continue // validate.go reports these.
		}
		at := fmt.Sprintf("%s[%d].mac", Key("nodes"), i)
		proxmoxOUI := c.Substrate.Kind == KindProxmox && [3]byte(mac[:3]) == ProxmoxOUI
		switch {
		case string(mac) == string(make([]byte, 6)):
			p.addf(at, "%s is the zero address, which no NIC may send from", mac)
		case c.Substrate.Kind == KindLibvirt && mac[0] == 0xfe:
			p.addf(at, "%s starts with 0xfe, which libvirt reserves for the host side of tap devices; use 52:54:00:xx:xx:xx", mac)
		case mac[0]&2 == 0 && !proxmoxOUI:
			p.addf(at, "%s is a universally administered (vendor) address another NIC may hold; use a locally administered one (e.g. 52:54:00:xx:xx:xx)", mac)
		}
	}
}

// checkAdoptedOnce refuses two nodes adopting one VM or domain, and two
// objects adopting one volume: import would make two resources of one
// object, and the first delete or replace takes the other's.
func (c *Config) checkAdoptedOnce(p *problems) {
	seen := map[string]int{}
	for i, n := range c.Nodes {
		id := strings.ToLower(n.AdoptID)
		if id == "" {
			continue
		}
		if j, dup := seen[id]; dup {
			p.addf(fmt.Sprintf("%s[%d].adoptId", Key("nodes"), i), "%q is also nodes[%d]'s adoptId: one domain cannot be two nodes", n.AdoptID, j)
		} else {
			seen[id] = i
		}
	}
	if lv := c.Substrate.Libvirt; lv != nil {
		by := map[string]string{}
		known := vocab.LibvirtAdoptable(c.Cluster.Name, nil)
		for _, logical := range sortedKeys(lv.Adopt) {
			id := lv.Adopt[logical]
			// A dir pool's volume key is its path, <pool target>/<name>
			// (libvirt storage_backend_fs.c virStorageBackendFileSystemVolCreate:
			// the target path joined with the volume name): a key elsewhere
			// is another pool's volume, which this stack's pool neither
			// holds nor may delete.
			volume := !slices.Contains(known[:2], logical) && strings.HasPrefix(id, "/")
			if volume && path.Dir(id) != lv.PoolPath && path.Clean(lv.PoolPath) == lv.PoolPath {
				p.addf(Key("substrate")+".libvirt.adopt."+logical, "%q is not in the stack's pool %s: a volume is adopted from its own pool only", id, lv.PoolPath)
			}
			if other, dup := by[id]; dup {
				p.addf(Key("substrate")+".libvirt.adopt."+logical, "%q is also adopted as %s: one object cannot be two", id, other)
			} else {
				by[id] = logical
			}
		}
	}
}

// checkGeneratedNames refuses names whose generated logical names collide:
// the program registers, per owner, resources of one type under a derived
// name, and two owners deriving one name would be one URN.
//   - a Proxmox node's disk holder VM is "<cluster>-<node>-disks", the VM
//     of a node named "<node>-disks" is the same name;
//   - an app, the storage layer and the workloads each register a
//     Namespace "<name>-ns" (and a HelmApp "<name>"), so an app named like
//     the storage layer or the workloads is their objects.
func (c *Config) checkGeneratedNames(p *problems) {
	if c.Substrate.Kind == KindProxmox {
		nodes := map[string]int{}
		for i, n := range c.Nodes {
			nodes[n.Name] = i
		}
		for i, n := range c.Nodes {
			if owner, ok := strings.CutSuffix(n.Name, vocab.HolderSuffix); ok {
				if j, taken := nodes[owner]; taken {
					p.addf(fmt.Sprintf("%s[%d].name", Key("nodes"), i), "%q is the name of nodes[%d]'s disk holder VM (%s-%s%s); rename the node", n.Name, j, c.Cluster.Name, owner, vocab.HolderSuffix)
				}
			}
		}
	}
	for i, a := range c.Apps {
		at := fmt.Sprintf("%s[%d].name", Key("apps"), i)
		if c.Storage.On() && a.Name == StorageAppName {
			p.addf(at, "%q is the storage layer's logical name; its namespace and release would be the storage layer's", a.Name)
		}
		if w := c.Workloads; w != nil && a.Name == w.Name {
			p.addf(at, "%q is also %s.name: both register the Namespace %s-ns", a.Name, Key("workloads"), a.Name)
		}
	}
}
