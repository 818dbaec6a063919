package pipeline

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io/fs"
	mbits "math/bits"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/stacks/config"
)

// The host facts these rules read, package variables so that a test points
// them at files of its own (production code reads the kernel's).
var (
	// devKVM is the kernel's KVM device, which a kvm domain's QEMU opens:
	// without it libvirt's QEMU driver offers no kvm domain type.
	devKVM = "/dev/kvm"
	// ipv4Routes is the kernel's IPv4 main routing table
	// (Documentation/networking/proc_net_route, as `route -n` reads it).
	ipv4Routes = "/proc/net/route"
)

// libvirtKVM refuses a stack whose libvirt domains are kvm, on a local
// libvirt (qemu:///system, qemu:///session, no host part), on a machine
// without /dev/kvm: the engine would create and protect the pool, the
// network, the boot image and every volume before libvirt refuses the
// first domain. A remote libvirt's /dev/kvm is its own machine's, which milner cannot
// see from here: not judged.
func libvirtKVM(o *Op) ([]gate.Refusal, error) {
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	lv := cfg.Substrate.Libvirt
	if cfg.Substrate.Kind != config.KindLibvirt || lv == nil || !cfg.Declares(config.LayerSubstrate) || lv.DomainType != "kvm" || !lv.Local() {
		return nil, nil
	}
	if _, err := os.Stat(devKVM); !errors.Is(err, fs.ErrNotExist) {
		return nil, nil // there, or not readable by milner (libvirt runs as another user): libvirt judges
	}
	return nil, Refused("%s.libvirt.domainType: kvm needs KVM, and this machine (libvirt %s) has no %s, so libvirt would refuse every domain after the pool, network, boot image and volumes were created. Set domainType: qemu (QEMU's TCG, slower; cpuMode then defaults to maximum), or run on a machine with KVM; nothing was changed",
		config.Key("substrate"), lv.URI, devKVM)
}

// remoteNodeNetwork refuses a stack declaring the Talos layer on a remote
// libvirt (a URI with a host) whose node network this machine has no
// route to: every Talos apply dials each node's address from here and
// would time out after the provider's 10 minutes.
//
// "No route" is judged simply: no route of the kernel's main IPv4 table,
// other than a default route, covers a node's address. A libvirt network
// is a bridge on the libvirt host, so only a route the user made (through
// the libvirt host, a VPN, an interface on that network) reaches it; a
// default route sends the private node network to the wrong place. What
// this leaves out: policy-routing tables besides main and a proxy
// (HTTPS_PROXY, which gRPC honours); both are rare for a node network, and
// the refusal names the fix (a route, or a local URI).
func remoteNodeNetwork(o *Op) ([]gate.Refusal, error) {
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	lv := cfg.Substrate.Libvirt
	if cfg.Substrate.Kind != config.KindLibvirt || lv == nil || lv.Local() || !cfg.Declares(config.LayerTalos) {
		return nil, nil
	}
	routes, err := readIPv4Routes(ipv4Routes)
	if err != nil {
		return nil, err
	}
	for i, n := range cfg.Nodes {
		if !routed(routes, n.Addr) {
			return nil, Refused("%s.libvirt.uri: libvirt %s is on another machine, and this one has no route to %s's address %s (nodes[%d]) in %s %s: every Talos apply would time out after 10 minutes. Add a route to %s through the libvirt host (or a VPN), run milner on that host with a local URI (qemu:///system), or set stopAfter: substrate; nothing was changed",
				config.Key("substrate"), lv.URI, n.Name, n.Addr, i, config.Key("network.cidr"), cfg.Network.Prefix, cfg.Network.Prefix)
		}
	}
	return nil, nil
}

// routed reports whether a route other than a default one covers a.
func routed(routes []netip.Prefix, a netip.Addr) bool {
	for _, r := range routes {
		if r.Bits() > 0 && r.Contains(a) {
			return true
		}
	}
	return false
}

// readIPv4Routes reads the usable routes of a /proc/net/route file: a
// header line, then per route Iface, Destination, Gateway, Flags, RefCnt,
// Use, Metric, Mask, … with Destination and Mask in hex in the host's
// byte order (the kernel prints the __be32 as a u32, net/ipv4/fib_trie.c
// fib_route_seq_show). A route not up (RTF_UP 0x1) or a reject route
// (RTF_REJECT 0x200) reaches nothing.
func readIPv4Routes(path string) ([]netip.Prefix, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []netip.Prefix
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 {
			continue
		}
		flags, err := strconv.ParseUint(fields[3], 16, 16)
		if err != nil || flags&0x1 == 0 || flags&0x200 != 0 {
			continue
		}
		dst, ok1 := hexAddr(fields[1])
		mask, ok2 := hexAddr(fields[7])
		if !ok1 || !ok2 {
			continue
		}
		bits := 0
		for _, b := range mask.As4() {
			bits += mbits.OnesCount8(b)
		}
		if p, err := dst.Prefix(bits); err == nil {
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

// hexAddr is an IPv4 address as /proc/net/route prints it.
func hexAddr(s string) (netip.Addr, bool) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return netip.Addr{}, false
	}
	var a [4]byte
	binary.NativeEndian.PutUint32(a[:], binary.BigEndian.Uint32(b))
	return netip.AddrFrom4(a), true
}
