package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ExposeConfig is an app's milner:apps[].expose: the host name the
// workstation reaches it at and the load-balancer address that name
// resolves to. The address is declared, not left to MetalLB, because the
// name's record (the dev network's DNS host, prod's site record) is made
// from it at preview, before any Service has an address.
type ExposeConfig struct {
	// Host is the app's DNS name, e.g. vault.milner.internal. Vault's
	// certificate must cover it (milner secrets generate issues it so).
	Host string `json:"host"`
	// Address is the app's fixed address in the load-balancer pool
	// (milner:network.vipRange, or milner:loadBalancer.pool).
	Address string `json:"address"`

	// Addr is Address, parsed.
	Addr netip.Addr `json:"-"`
}

// AppName is one exposed app's name and address, in config order: what the
// dev network's DNS answers and what the site's DNS must hold.
type AppName struct {
	// App is the app's logical name.
	App string
	// Host is its DNS name.
	Host string
	// Address is its load-balancer address.
	Address netip.Addr
}

// AppNames lists the exposed apps of a loaded config (installed apps only:
// Woodpecker without a forge is off and has no name).
func (c *Config) AppNames() []AppName {
	if !c.StopAfter.Includes(LayerApps) {
		return nil
	}
	var out []AppName
	for _, a := range c.Apps {
		if a.Expose != nil && !a.WoodpeckerOff() {
			out = append(out, AppName{App: a.Name, Host: a.Expose.Host, Address: a.Expose.Addr})
		}
	}
	return out
}

// isDNSName reports a lowercase DNS name (RFC 1123) of at most 253
// characters: one or more dnsLabel joined by dots.
func isDNSName(s string) bool {
	return len(s) <= 253 && !slices.ContainsFunc(strings.Split(s, "."), func(l string) bool { return !dnsLabel.MatchString(l) })
}

// validateExpose checks every app's expose: Vault only (the one chart whose
// Service Milner sets; Woodpecker's chart cannot serve TLS itself, see
// docs/design.md "Names and TLS"), a DNS name, an address inside the pool,
// no two apps on one address or one name, and a load balancer to give it.
func (c *Config) validateExpose(p *problems) {
	pool := c.LBPool()
	addrs, hosts := map[netip.Addr]string{}, map[string]string{}
	for i := range c.Apps {
		a := &c.Apps[i]
		e := a.Expose
		if e == nil {
			continue
		}
		ep := fmt.Sprintf("%s[%d].expose", Key("apps"), i)
		if a.Vault == nil {
			p.addf(ep, "is for a Vault app, which serves its own TLS; Woodpecker's chart probes plain HTTP on its one port, so it cannot serve TLS itself, and no ingress controller is installed (docs/design.md \"Names and TLS\")")
		}
		if c.StopAfter.Includes(LayerApps) && !c.LBOn() {
			p.addf(ep, "needs the load balancer: set %s (or %s on an existing cluster)", Key("network")+".vipRange", Key("loadBalancer")+".pool")
		}
		switch {
		case !isDNSName(e.Host):
			p.addf(ep+".host", "%q is not a lowercase DNS name (labels of a-z, 0-9 and -, joined by dots)", e.Host)
		case hosts[e.Host] != "":
			p.addf(ep+".host", "%q is also the host of %s", e.Host, hosts[e.Host])
		default:
			hosts[e.Host] = ep
		}
		addr, err := netip.ParseAddr(e.Address)
		switch {
		case err != nil || addr.Zone() != "" || !addr.IsGlobalUnicast():
			p.addf(ep+".address", "%q is not a unicast IP address", e.Address)
			continue
		case pool != nil && pool.From.IsValid() && !pool.Contains(addr):
			p.addf(ep+".address", "%s is outside the load-balancer pool %s-%s: MetalLB gives only the pool's addresses", addr, pool.From, pool.To)
		case addrs[addr] != "":
			p.addf(ep+".address", "%s is also the address of %s: each app has its own", addr, addrs[addr])
		}
		if addrs[addr] == "" {
			addrs[addr] = ep
		}
		e.Addr = addr
	}
}

// exposeOwned are the Vault chart values the expose block sets (its UI
// Service, vault-helm templates/ui-service.yaml); a stack that exposes
// Vault may not set them in values.
var exposeOwned = []string{"ui.enabled", "ui.serviceType", "ui.annotations", "ui.loadBalancerIP"}

// checkExposeOwned refuses values the expose block sets.
func checkExposeOwned(p *problems, ap string, a *AppConfig) {
	if a.Expose == nil {
		return
	}
	for _, owned := range exposeOwned {
		if v, ok := lookupPath(a.Values, owned); ok && (owned != "ui.enabled" || v != true) {
			p.addf(ap+".values."+owned, "is set by %s.expose (Vault's UI Service is the app's LoadBalancer at its address)", ap)
		}
	}
}
