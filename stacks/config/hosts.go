package config

// Where a credential is sent (issue #49, class 2). A host written with a
// non-ASCII look-alike letter (a Cyrillic "а" in "pve-1.home.аrpa") reads
// as the host the operator means and resolves to another one, which then
// receives the Proxmox API token, the forge's OAuth secret or the users'
// logins. So every URL host of the stack is ASCII: an internationalized
// name is written as its punycode (xn--...), which no reviewer mistakes
// for a plain one, and never percent-escaped (net/url unescapes a host).
// And a credential crosses the network in clear text only where it stays
// on this machine: plain http:// only to a loopback address or the libvirt
// host (the NAT gateway of a libvirt network is the host's own bridge).

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"unicode"

	"golang.org/x/net/idna"
)

// hostURL is one URL of the stack and what its host receives.
type hostURL struct {
	at, raw, gets string
	// clearText: http:// may be allowed (loopback, the libvirt host).
	clearText bool
}

// hostURLs lists the URLs of the stack by config path.
func (c *Config) hostURLs() []hostURL {
	var out []hostURL
	add := func(at, raw, gets string, clearText bool) {
		if raw != "" {
			out = append(out, hostURL{at, raw, gets, clearText})
		}
	}
	if px := c.Substrate.Proxmox; px != nil {
		add(Key("substrate")+".proxmox.endpoint", px.Endpoint, "the Proxmox VE API token", false)
		add(Key("substrate")+".proxmox.imageUrl", px.ImageURL, "PVE's download of the boot image", false)
	}
	if lv := c.Substrate.Libvirt; lv != nil {
		add(Key("substrate")+".libvirt.uri", lv.URI, "the hypervisor's control (ssh or TLS credentials)", false)
		if strings.Contains(lv.BootImage, "://") {
			add(Key("substrate")+".libvirt.bootImage", lv.BootImage, "the download of the boot image", false)
		}
	}
	if c.StartAt != LayerApps {
		add(Key("cluster.endpoint"), c.Cluster.Endpoint, "the admin client certificate's handshake", false)
	}
	if o := c.Cluster.OIDC; o != nil {
		add(Key("cluster")+".oidc.issuerUrl", o.IssuerURL, "the users' OIDC logins", false)
	}
	for i, a := range c.Apps {
		ap := fmt.Sprintf("%s[%d]", Key("apps"), i)
		add(ap+".chart.repo", a.Chart.Repo, "the chart download", false)
		if w := a.Woodpecker; w != nil {
			add(ap+".woodpecker.host", w.Host, "the users' Woodpecker sessions and the forge's OAuth redirect", true)
			if w.Forge != nil {
				add(ap+".woodpecker.forge.url", w.Forge.URL, "Woodpecker's OAuth client secret and the users' forge logins", true)
			}
		}
	}
	if s := c.Storage; s.On() {
		add(Key("storage")+".chart.repo", s.Chart.Repo, "the chart download", false)
	}
	for _, from := range sortedKeys(c.ChartMirrors) {
		add(Key("chartMirrors")+"["+from+"]", c.ChartMirrors[from], "the chart download", false)
	}
	return out
}

// checkCredentialHosts is the rule of this file.
func (c *Config) checkCredentialHosts(p *problems) {
	for _, h := range c.hostURLs() {
		scheme, rest, ok := strings.Cut(h.raw, "://")
		if !ok {
			continue // not a URL: the field's own rule reports it
		}
		authority := rest
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			authority = rest[:i]
		}
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			authority = authority[at+1:]
		}
		if i := strings.IndexFunc(authority, func(r rune) bool { return r > unicode.MaxASCII || r == '%' }); i >= 0 {
			p.addf(h.at, "%q has a host that is not plain ASCII (%q): a look-alike letter or an escape can name another host than it reads as, and that host gets %s; write the host in ASCII%s", h.raw, authority, h.gets, punycodeHint(authority))
			continue
		}
		if !strings.EqualFold(scheme, "http") || !h.clearText {
			continue
		}
		u, err := url.Parse(h.raw)
		if err != nil {
			continue
		}
		if host := u.Hostname(); !loopbackHost(host) && !c.libvirtHost(host) {
			p.addf(h.at, "%q is plain http:// to %s, which gets %s in clear text on the way; use https:// (plain http:// only to a loopback address or the libvirt host%s)", h.raw, host, h.gets, c.libvirtHostHint())
		}
	}
}

// punycodeHint names the ASCII form of an internationalized host.
func punycodeHint(host string) string {
	name := host
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host, "]") {
		name = host[:i]
	}
	if ascii, err := idna.Lookup.ToASCII(name); err == nil && ascii != name && !strings.Contains(name, "%") {
		return fmt.Sprintf(" (its punycode is %s, if that is the host you mean)", ascii)
	}
	return ""
}

// libvirtHost reports whether host is the libvirt host's own address on
// the stack's libvirt network (its first host address: libvirtHostAddr).
func (c *Config) libvirtHost(host string) bool {
	a, err := netip.ParseAddr(host)
	return err == nil && c.Substrate.Kind == KindLibvirt && c.Network.Prefix.IsValid() && a == libvirtHostAddr(c.Network.Prefix)
}

func (c *Config) libvirtHostHint() string {
	if c.Substrate.Kind != KindLibvirt || !c.Network.Prefix.IsValid() {
		return ""
	}
	return " " + libvirtHostAddr(c.Network.Prefix).String()
}
