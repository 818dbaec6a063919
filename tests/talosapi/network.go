package talosapi

import (
	"fmt"
	"net/netip"

	glob "github.com/ryanuber/go-glob"
	"github.com/siderolabs/gen/optional"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
)

// The node's network, as far as the double models it: one physical link
// (a VM's one virtio NIC) with the node's MAC, and the one address the
// node listens on. Talos v1.13.9 decides what that link carries from the
// running config:
//
//   - a machine.network.interfaces[] device with a deviceSelector applies
//     to the links the selector matches (internal/app/machined/pkg/
//     controllers/network/device_config.go, DeviceConfigController.Run
//     and selectDevices: each of hardwareAddr, permanentAddr, pciID,
//     driver and busPath that is set must glob-match the link's; physical
//     must equal the link's). A device that matches no link is skipped,
//     with only a log line ("failed to select an interface for a device":
//     "no matching network device for defined selector"): its addresses,
//     routes and VIP go nowhere, and the apply itself succeeds;
//   - a physical link no device applies to runs the default DHCPv4
//     operator (controllers/network/operator_config.go: "enable DHCPv4
//     operator on physical interfaces which don't have any explicit
//     configuration", while the config has no multi-doc link or DHCP
//     documents, machinery config/container RunDefaultDHCPOperators), as
//     in maintenance mode.
//
// So a node whose deviceSelector names another MAC keeps the address its
// network's DHCP gives its MAC and holds no static address and no VIP. On
// Milner's libvirt networks DHCP reserves each node's address for its MAC
// (components/substrate: the domain's NIC addresses), so such a node still
// answers at its address; where DHCP gives it nothing (WithoutDHCPLease)
// it answers nowhere. A device named by interface instead of a selector is
// taken as the node's link (link names are not modelled).

// Link is the node's one network link as Talos' LinkStatus reports it.
type Link struct {
	// HardwareAddr is its MAC (also its permanent address).
	HardwareAddr string
	// Driver, PCIID and BusPath are what a virtio NIC of a libvirt q35
	// domain reports.
	Driver, PCIID, BusPath string
}

// virtioLink is a link with the node's MAC, on a VM.
func virtioLink(mac string) Link {
	return Link{HardwareAddr: mac, Driver: "virtio_net", PCIID: "1AF4:1041", BusPath: "0000:01:00.0"}
}

// defaultMAC is the MAC of a node without WithMAC: libvirt's 52:54:00
// prefix and the address's last three bytes.
func defaultMAC(ip netip.Addr) string {
	b := ip.As16()
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[13], b[14], b[15])
}

// WithMAC sets the MAC of the node's link (default 52:54:00 and the last
// three bytes of its address): a deviceSelector must match it for the
// config's static address and VIP to apply.
func WithMAC(mac string) NodeOption { return func(o *nodeOptions) { o.mac = mac } }

// WithoutDHCPLease is a node its network's DHCP gives no address: it
// answers at its address only while its running config's matched device
// carries that address. Without it, DHCP hands the node its address (as
// libvirt's reservation by MAC does), so it answers there in maintenance
// mode and wherever no device applies to its link.
func WithoutDHCPLease() NodeOption { return func(o *nodeOptions) { o.noLease = true } }

// matches is selectDevices for one selector and the node's link.
func (l Link) matches(sel talosconfig.NetworkDeviceSelector) bool {
	var match optional.Optional[bool]
	for _, pair := range [][2]string{
		{sel.HardwareAddress(), l.HardwareAddr},
		{sel.PermanentAddress(), l.HardwareAddr},
		{sel.PCIID(), l.PCIID},
		{sel.KernelDriver(), l.Driver},
		{sel.Bus(), l.BusPath},
	} {
		if pair[0] == "" {
			continue
		}
		if !glob.Glob(pair[0], pair[1]) {
			match = optional.Some(false)
			break
		}
		match = optional.Some(true)
	}
	if sel.Physical() != nil && match.ValueOr(true) {
		match = optional.Some(*sel.Physical()) // the link is physical
	}
	return match.ValueOrZero()
}

// netState is what the node's link carries under its running config.
type netState struct {
	// addressed: the node holds its address (static or by DHCP).
	addressed bool
	// vip is the shared IP of the device applied to the link (zero: none).
	vip netip.Addr
	// skipped are the warnings of devices whose selector matched nothing.
	skipped []string
}

// networkLocked is the node's netState (c.mu held).
func (n *Node) networkLocked() netState {
	lease := !n.opts.noLease
	if n.active == nil {
		return netState{addressed: lease}
	}
	link := virtioLink(n.opts.mac)
	var s netState
	applied := false
	for _, d := range n.active.cfg.Machine().Network().Devices() {
		if d.Ignore() {
			continue
		}
		if sel := d.Selector(); sel != nil && !link.matches(sel) {
			s.skipped = append(s.skipped, fmt.Sprintf("failed to select an interface for a device: no matching network device for defined selector: %+v", sel))
			continue
		}
		applied = true
		for _, a := range d.Addresses() {
			if p, err := netip.ParsePrefix(a); err == nil && p.Addr() == n.addr.Addr() {
				s.addressed = true
			}
		}
		if d.DHCP() && lease {
			s.addressed = true
		}
		if v := d.VIPConfig(); v != nil {
			if ip, err := netip.ParseAddr(v.IP()); err == nil {
				s.vip = ip
			}
		}
	}
	if !applied && lease {
		s.addressed = true // the default DHCPv4 operator
	}
	return s
}

// syncNetworkLocked brings the node's listening in line with its network
// after its running config changed in place (a NO_REBOOT or TRY apply:
// Talos' network controllers apply it at once), in the background: the
// call that changed it is answered first.
func (n *Node) syncNetworkLocked() {
	if n.inc == nil {
		return
	}
	s := n.networkLocked()
	if s.addressed == n.addressed {
		return
	}
	n.addressed = s.addressed
	n.eventLocked("network", n.networkDetail(s))
	inc := n.inc
	go func() {
		n.life.Lock()
		defer n.life.Unlock()
		n.c.mu.Lock()
		want, cur := n.reachable && n.addressed, n.inc
		n.c.mu.Unlock()
		if cur != inc {
			return
		}
		if want {
			_ = inc.startFront()
		} else {
			inc.stopFront()
		}
	}()
}

// networkDetail is the journal's "network" event detail.
func (n *Node) networkDetail(s netState) string {
	d := "address " + n.addr.Addr().String()
	if !s.addressed {
		d = "no address " + n.addr.Addr().String()
	}
	for _, w := range s.skipped {
		d += "; " + w
	}
	return d
}
