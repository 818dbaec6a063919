package config

// Transport (issue #33): the libvirt connection carries the hypervisor's
// full control (and, through the provider, the nodes' first machine
// configs). A URI that skips the server's host-key or certificate check, or
// that speaks plain TCP off this machine, is refused at load.

import (
	"net/url"
	"strings"
)

// checkLibvirtTransport is the transport rule. The URI is read by
// terraform-provider-libvirt 0.8.3 (libvirt/uri, as pulumi-libvirt bundles
// it): its ssh transport skips the host-key check when the query merely
// has no_verify (ssh.go: skipVerify := q.Has("no_verify"), whatever the
// value, 0 included) or known_hosts_verify=ignore, its tls transport when
// no_verify is non-zero or not a number (tls.go nonZero), and its tcp
// transport is a bare net.Dial. libvirt's own clients (virsh) read the same
// parameters case-insensitively (src/util/viruri.c), so every case and
// URL-escaped spelling of the names is refused.
func checkLibvirtTransport(p *problems, at, uri string) {
	u, err := url.Parse(uri)
	if err != nil || !strings.Contains(uri, "://") {
		return // validate.go and checkLibvirtURI report it.
	}
	transport := ""
	if _, t, ok := strings.Cut(u.Scheme, "+"); ok {
		transport = t
	}
	if transport == "tcp" && u.Hostname() != "" && !loopbackHost(u.Hostname()) {
		p.addf(at, "%q speaks plain TCP to %s: libvirt's tcp transport neither encrypts nor authenticates the server, so whoever is on the path controls the hypervisor; use qemu+ssh:// or qemu+tls://", uri, u.Hostname())
	}
	for _, kv := range strings.Split(u.RawQuery, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		switch strings.ToLower(k) {
		case "no_verify":
			p.addf(at, "%q sets no_verify (=%s): the provider then skips the server's host-key (ssh, whatever the value) or certificate (tls) check; remove it and trust the host's key (known_hosts) or CA", uri, v)
		case "known_hosts_verify":
			if strings.EqualFold(strings.TrimSpace(v), "ignore") {
				p.addf(at, "%q sets known_hosts_verify=%s: libvirt then accepts any host key; remove it (the default, normal, checks known_hosts)", uri, v)
			}
		}
	}
}
