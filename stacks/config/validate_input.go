package config

// Input hygiene: values that reach a shell-like parser, the host's file
// system or a download are refused before anything is touched, each naming
// its config path (issue #14 item 6). The range and duplicate checks of the
// ordinary shape live in validate.go.

import (
	"fmt"
	"github.com/milner/milner/components/vocab"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
)

// MaxControlPlanes is the largest control-plane count validation accepts.
// etcd's own guidance: "an etcd cluster probably should have no more than
// seven nodes" (etcd FAQ, "What is maximum cluster size?"); every member
// adds a replication round trip to each write and tolerates no extra
// failure beyond what seven give (three). More is refused, not warned.
const MaxControlPlanes = 7

// LibvirtURISchemes are the libvirt URI schemes a stack may name: the QEMU
// driver over its local socket or a remote transport libvirt itself speaks.
// qemu+ext is left out on purpose: it runs an arbitrary local command.
var LibvirtURISchemes = []string{"qemu", "qemu+unix", "qemu+ssh", "qemu+libssh", "qemu+libssh2", "qemu+tcp", "qemu+tls"}

// unsafePoolPaths are directories a storage pool must never be: libvirt
// builds a dir pool by creating and chmod-ing its target and deletes the
// directory with the pool, so a pool on one of these would take a system
// directory, another pool (libvirt's default pool lives in
// /var/lib/libvirt/images) or every user's home with it. Their
// subdirectories are fine, except under the system trees in unsafePoolRoots.
var unsafePoolPaths = []string{
	"/", "/home", "/root", "/tmp", "/var", "/var/lib", "/var/tmp", "/srv", "/opt", "/mnt", "/media",
	"/var/lib/libvirt", "/var/lib/libvirt/images",
}

// unsafePoolRoots are system trees no pool may be in, at any depth.
var unsafePoolRoots = []string{"/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/dev", "/proc", "/sys", "/run"}

// sha256Hex matches a SHA-256 digest in hexadecimal.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// normalizeMAC returns the colon form of a 6-byte MAC given in any notation
// net.ParseMAC reads (52-54-00-..., 5254.0009.0011, bare hex), lowercase, so that
// duplicates are found across notations and libvirt gets one spelling. A
// value that does not parse is returned as given, for validation to report.
func normalizeMAC(s string) string {
	mac, err := parseMAC(s)
	if err != nil {
		return strings.ToLower(s)
	}
	return mac.String()
}

// validateInput runs the input-hygiene checks; validate calls it last.
func (c *Config) validateInput(p *problems) {
	if lv := c.Substrate.Libvirt; lv != nil {
		sp := Key("substrate") + ".libvirt"
		checkLibvirtURI(p, sp+".uri", lv.URI)
		checkLibvirtTransport(p, sp+".uri", lv.URI)
		checkPoolPath(p, sp+".poolPath", lv.PoolPath)
		c.checkBootImage(p, sp)
	}
	c.checkProxmoxImage(p)
	c.checkNameservers(p)
	if r := c.Network.VIPRange; r.Contains(c.Network.GatewayAddr) {
		p.addf(Key("network")+".vipRange", "contains the gateway %s", c.Network.GatewayAddr)
	}
	c.checkReleases(p)
	c.validateHostile(p)
	c.checkProvenance(p)
	c.checkHardeningValues(p)
	c.checkCredentialHosts(p)
	c.checkChartCode(p)
	c.checkJoinedLists(p)
	c.checkFiles(p)
	c.checkWorkloadsRules(p)
	c.validateShape(p)
	cps := 0
	for _, n := range c.Nodes {
		if n.Role == vocab.RoleControlPlane {
			cps++
		}
	}
	if cps > MaxControlPlanes {
		p.addf(Key("nodes"), "%d control planes: more than %d etcd members only slow every write (etcd recommends at most %d); make the rest workers", cps, MaxControlPlanes, MaxControlPlanes)
	}
}

// checkLibvirtURI refuses a URI of a scheme libvirt's QEMU driver does not
// serve, or one carrying characters a shell or libvirt's own parser would
// take as syntax (the URI reaches the provider, and an ssh transport runs a
// remote command).
func checkLibvirtURI(p *problems, at, uri string) {
	if i := strings.IndexFunc(uri, func(r rune) bool {
		return r < 0x20 || r == 0x7f || r == ' ' || strings.ContainsRune("`$;|&<>'\"\\(){}*!", r)
	}); i >= 0 {
		p.addf(at, "%q contains %q, which no libvirt URI needs", uri, uri[i:i+1])
		return
	}
	u, err := url.Parse(uri)
	if err != nil || !strings.Contains(uri, "://") {
		return // validate.go reports a value that is not a URI at all.
	}
	if !slices.Contains(LibvirtURISchemes, u.Scheme) {
		p.addf(at, "unknown libvirt URI scheme %q (want one of %v)", u.Scheme, LibvirtURISchemes)
		return
	}
	if u.Path != "/system" && u.Path != "/session" {
		p.addf(at, "%q names no QEMU driver instance (want a path of /system or /session)", uri)
	}
}

// checkPoolPath refuses a pool directory that is not a clean absolute path
// or that is, or lies in, a directory no pool may own (see unsafePoolPaths).
func checkPoolPath(p *problems, at, dir string) {
	if !strings.HasPrefix(dir, "/") {
		return // validate.go reports a relative path.
	}
	if path.Clean(dir) != dir {
		p.addf(at, "%q is not a clean path (no .., . or trailing /); write it as %q if that is what you mean", dir, path.Clean(dir))
		return
	}
	if slices.Contains(unsafePoolPaths, dir) {
		p.addf(at, "%q is a shared directory; a pool owns and deletes its directory, so give it one of its own (e.g. %s/<cluster>)", dir, strings.TrimSuffix(dir, "/"))
		return
	}
	for _, root := range unsafePoolRoots {
		if dir == root || strings.HasPrefix(dir, root+"/") {
			p.addf(at, "%q is inside the system directory %s", dir, root)
			return
		}
	}
}

// checkBootImage refuses a boot image that is fetched in the clear or is
// neither an https:// URL nor an absolute local path, a malformed checksum,
// and an explicit URL without a checksum. terraform-provider-libvirt 0.8.3
// downloads a volume's source without any integrity check, so the pin is
// the only one; `milner up` verifies it against a local file before the
// boot media is created (a remote image cannot be verified without its
// download). The default factory URL has no published digest that could be
// known offline: it is a warning naming the key that pins it.
func (c *Config) checkBootImage(p *problems, sp string) {
	lv := c.Substrate.Libvirt
	img, sum := lv.BootImage, lv.BootImageSHA256
	remote := strings.Contains(img, "://")
	switch {
	case remote && !strings.HasPrefix(img, "https://"):
		p.addf(sp+".bootImage", "%q is not an https:// URL or a local path; a download in the clear can be swapped on the way", img)
	case !remote && (!strings.HasPrefix(img, "/") || path.Clean(img) != img):
		p.addf(sp+".bootImage", "%q is not an https:// URL or a clean absolute path", img)
	}
	switch {
	case sum != "" && !sha256Hex.MatchString(sum):
		p.addf(sp+".bootImageSha256", "%q is not a SHA-256 digest (64 lowercase hex digits, as sha256sum prints)", sum)
	case sum == "" && remote && !lv.defaultImage:
		p.addf(sp+".bootImageSha256", "is required with a downloaded bootImage (sha256sum of the image)")
	case sum == "" && remote:
		p.warnf(sp+".bootImageSha256", "the default boot image %s is downloaded without a pinned digest; set bootImageSha256 to its sha256sum", img)
	}
}

// checkNameservers refuses nameservers no node can query: the unspecified
// address (0.0.0.0 means "none" to a resolver), multicast, the limited
// broadcast, loopback (a node's own loopback has no DNS server behind it)
// and the node network's own network and broadcast addresses.
func (c *Config) checkNameservers(p *problems) {
	n := c.Network
	if len(n.Nameservers) != len(n.NameserverAddrs) {
		return
	}
	seen := map[netip.Addr]int{}
	for i, a := range n.NameserverAddrs {
		if !a.IsValid() {
			continue // validate.go reports an unparsable one.
		}
		at := fmt.Sprintf("%s.nameservers[%d]", Key("network"), i)
		switch {
		case a.IsUnspecified():
			p.addf(at, "%s is the unspecified address, not a server", a)
		case a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			p.addf(at, "%s is a multicast or broadcast address, not a server", a)
		case a.IsLoopback():
			p.addf(at, "%s is a loopback address: each node would ask itself", a)
		case !a.Is4():
			// The node network is IPv4 only (network.cidr): a node has no
			// IPv6 address or route to reach the resolver from.
			p.addf(at, "%s is not an IPv4 address, and the node network %s is IPv4 only: no node can reach it; give the resolver's IPv4 address", a, n.Prefix)
		case n.Prefix.IsValid() && (a == n.Prefix.Addr() || a == lastAddr(n.Prefix)):
			p.addf(at, "%s is the network or broadcast address of %s", a, n.Prefix)
		}
		if j, dup := seen[a]; dup {
			p.addf(at, "%s is also nameservers[%d]", a, j)
		} else {
			seen[a] = i
		}
	}
}

// checkReleases refuses two apps that would be the same Helm release: one
// release name in one namespace is one object to Helm, so the second app
// would take the first one's release over.
func (c *Config) checkReleases(p *problems) {
	seen := map[string]int{}
	for i, a := range c.Apps {
		id := a.Namespace + "/" + a.ReleaseName
		if j, dup := seen[id]; dup {
			p.addf(fmt.Sprintf("%s[%d].releaseName", Key("apps"), i), "release %q in namespace %q is also apps[%d]'s", a.ReleaseName, a.Namespace, j)
		} else {
			seen[id] = i
		}
	}
}
