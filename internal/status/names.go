package status

import (
	"fmt"
	"io"
	"strings"

	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/stacks/config"
)

// Names are the apps' host names (milner:apps[].expose) and how the
// workstation resolves them: on a libvirt stack the network's DNS answers
// them (substrate.DNSHost), so the workstation's resolver is pointed at
// it, or the hosts lines added; elsewhere the site's DNS must hold them.
type Names struct {
	// Hosts are the names and their load-balancer addresses, in config order.
	Hosts []Name `json:"hosts"`
	// Resolver is the libvirt network's DNS server that answers the names
	// ("" on a stack whose names are the site's DNS's).
	Resolver string `json:"resolver,omitempty"`
	// Bridge is the libvirt network's bridge, where the resolver listens.
	Bridge string `json:"bridge,omitempty"`
}

// Name is one app's name.
type Name struct {
	App     string `json:"app"`
	Host    string `json:"host"`
	Address string `json:"address"`
}

// NamesOf reads the names of a loaded config; nil when no app is exposed.
func NamesOf(cfg *config.Config) *Names {
	names := cfg.AppNames()
	if len(names) == 0 {
		return nil
	}
	n := &Names{}
	for _, a := range names {
		n.Hosts = append(n.Hosts, Name{App: a.App, Host: a.Host, Address: a.Address.String()})
	}
	if cfg.Substrate.Kind == config.KindLibvirt && cfg.Network.Prefix.IsValid() {
		// libvirt's dnsmasq listens on the network's own address, its
		// first host address (the address the substrate gives the bridge).
		n.Resolver = cfg.Network.Prefix.Masked().Addr().Next().String()
		n.Bridge = substrate.BridgeName(cfg.Cluster.Name)
	}
	return n
}

// Write prints the names: on libvirt, how to point the workstation's
// resolver at the network's DNS, or the hosts lines; elsewhere the
// records to add to the site's DNS.
func (n *Names) Write(w io.Writer) {
	if n.Resolver != "" {
		_, _ = fmt.Fprintf(w, "names (the network's DNS at %s answers them):\n", n.Resolver)
		var domains []string
		for _, h := range n.Hosts {
			_, _ = fmt.Fprintf(w, "  %-28s %s\n", h.Host, h.Address)
			domains = append(domains, "'~"+h.Host+"'")
		}
		_, _ = fmt.Fprintf(w, "  resolve them through it (systemd-resolved):\n    sudo resolvectl dns %s %s\n    sudo resolvectl domain %s %s\n", n.Bridge, n.Resolver, n.Bridge, strings.Join(domains, " "))
		_, _ = fmt.Fprintln(w, "  or add these lines to /etc/hosts:")
		for _, h := range n.Hosts {
			_, _ = fmt.Fprintf(w, "    %s %s\n", h.Address, h.Host)
		}
		return
	}
	_, _ = fmt.Fprintln(w, "names (add these records to the site's DNS):")
	for _, h := range n.Hosts {
		typ := "A"
		if strings.Contains(h.Address, ":") {
			typ = "AAAA"
		}
		_, _ = fmt.Fprintf(w, "  %s. IN %s %s\n", h.Host, typ, h.Address)
	}
}
