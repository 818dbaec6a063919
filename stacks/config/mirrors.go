package config

import (
	"net/netip"
	"net/url"
	"strings"
)

// ChartMirrors is milner:chartMirrors: for a site that cannot reach the
// public registries, each entry maps a published chart source prefix (an
// https:// chart repository or an oci:// registry path, as a chart's repo
// says it) to the mirror prefix the charts are fetched from instead. The
// stack's chart coordinates stay the published ones (what PublishedCharts
// holds them against, and what `milner preview` reports); a mirror only
// says where to fetch them.
//
//	milner:chartMirrors:
//	  https://helm.releases.hashicorp.com: https://charts.lan/hashicorp
//	  oci://ghcr.io: oci://registry.lan/ghcr
type ChartMirrors map[string]string

// Fetch returns the source a chart published at repo is fetched from: repo
// with its longest mirrored prefix replaced (a prefix matches the whole
// repo or a leading run of its path segments), else repo itself. It is
// the one place a mirror is applied.
func (m ChartMirrors) Fetch(repo string) string {
	best := ""
	for from := range m {
		if (repo == from || strings.HasPrefix(repo, from+"/")) && len(from) > len(best) {
			best = from
		}
	}
	if best == "" {
		return repo
	}
	return m[best] + strings.TrimPrefix(repo, best)
}

// validateChartMirrors checks milner:chartMirrors: a published prefix is an
// https:// chart repository or an oci:// registry path; its mirror is of the
// same kind (a chart repository serves an index.yaml, a registry does not),
// https:// or oci://, and plain http:// only on a loopback address (a chart
// fetched in clear text from the network could be swapped on the way).
func (c *Config) validateChartMirrors(p *problems) {
	mp := Key("chartMirrors")
	for _, from := range sortedKeys(c.ChartMirrors) {
		to := c.ChartMirrors[from]
		path := mp + "[" + from + "]"
		fromOCI := strings.HasPrefix(from, "oci://")
		if !fromOCI && !strings.HasPrefix(from, "https://") {
			p.addf(path, "%q is not a published chart source prefix (an https:// chart repository or an oci:// registry path)", from)
			continue
		}
		if strings.HasSuffix(from, "/") || strings.HasSuffix(to, "/") {
			p.addf(path, "a prefix ends without /: %q -> %q", from, to)
			continue
		}
		u, err := url.Parse(to)
		switch {
		case err != nil || u.Host == "":
			p.addf(path, "mirror %q is not a URL", to)
		case fromOCI && u.Scheme != "oci":
			p.addf(path, "mirror %q of an oci:// registry must be an oci:// registry", to)
		case !fromOCI && u.Scheme != "https" && u.Scheme != "http":
			p.addf(path, "mirror %q of a chart repository must be an https:// chart repository", to)
		case u.Scheme == "http" && !loopbackHost(u.Hostname()):
			p.addf(path, "mirror %q is plain http:// off this machine: use https:// (plain http:// only on a loopback address)", to)
		}
	}
}

// loopbackHost reports whether host is a loopback address or localhost.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// MirroredChart is one chart a stack fetches through a mirror, as `milner
// preview` reports it.
type MirroredChart struct {
	// App is the app's logical name.
	App string `json:"app"`
	// Published is the chart's source as the stack pins it.
	Published string `json:"published"`
	// Fetch is where it is fetched from.
	Fetch string `json:"fetch"`
}

// Mirrored lists the charts of a loaded config fetched through
// milner:chartMirrors, in InstalledCharts' order.
func (c *Config) Mirrored() []MirroredChart {
	var out []MirroredChart
	for _, ic := range c.InstalledCharts() {
		if f := c.ChartMirrors.Fetch(ic.Chart.Repo); ic.Chart.Path == "" && f != ic.Chart.Repo {
			out = append(out, MirroredChart{App: ic.App, Published: ic.Chart.Repo, Fetch: f})
		}
	}
	return out
}

// InstalledChart is one chart a stack installs, by its release's logical name.
type InstalledChart struct {
	App   string
	Chart ChartConfig
}

// InstalledCharts lists the charts a loaded config installs, in the apps
// layer's order (stacks/apps.go): the storage provisioner's, the load
// balancer's (MetalLB), then each app's in config order, Woodpecker
// without a forge left out (it is off). None when the stack stops before
// the apps layer.
func (c *Config) InstalledCharts() []InstalledChart {
	if !c.StopAfter.Includes(LayerApps) {
		return nil
	}
	var out []InstalledChart
	if c.Storage.On() {
		out = append(out, InstalledChart{StorageAppName, c.Storage.Chart})
	}
	if c.LBOn() {
		out = append(out, InstalledChart{LoadBalancerAppName, c.LoadBalancer.Chart})
	}
	for _, a := range c.Apps {
		if !a.WoodpeckerOff() {
			out = append(out, InstalledChart{a.Name, a.Chart})
		}
	}
	return out
}
