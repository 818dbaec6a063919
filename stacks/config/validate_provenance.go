package config

// Provenance (issue #33): the images and charts Milner runs by default come
// from where their makers publish them. A look-alike host, a registry swap
// or a version nobody recorded as published is refused at load; a site that
// cannot reach the published sources fetches charts through
// milner:chartMirrors (which keeps the published coordinates in the stack)
// and pins an installer by digest, which holds its content wherever it is
// served from.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// recordedImage is one image a hardened profile's chart runs, as its
// chart's values.yaml names it: the value keys that set it and the
// repository they default to (registry included).
type recordedImage struct {
	// Registry is the value key of the image's registry ("" when the chart
	// has none and the repository carries it).
	Registry string
	// Repository is the value key of the image's repository.
	Repository string
	// Source is the published image, registry/repository.
	Source string
}

// vaultImages are vault-helm 0.29.1's images (values.yaml: injector.image,
// injector.agentImage, server.image, csi.image, csi.agent.image; each a
// Docker Hub repository the chart names without a registry).
var vaultImages = []recordedImage{
	{Repository: "injector.image.repository", Source: "docker.io/hashicorp/vault-k8s"},
	{Repository: "injector.agentImage.repository", Source: "docker.io/hashicorp/vault"},
	{Repository: "server.image.repository", Source: "docker.io/hashicorp/vault"},
	{Repository: "csi.image.repository", Source: "docker.io/hashicorp/vault-csi-provider"},
	{Repository: "csi.agent.image.repository", Source: "docker.io/hashicorp/vault"},
}

// woodpeckerImages are the woodpecker-ci/helm 3.2.0 chart's images
// (values.yaml agent.image and server.image: registry docker.io,
// repository woodpeckerci/woodpecker-agent and -server).
var woodpeckerImages = []recordedImage{
	{Registry: "agent.image.registry", Repository: "agent.image.repository", Source: "docker.io/woodpeckerci/woodpecker-agent"},
	{Registry: "server.image.registry", Repository: "server.image.repository", Source: "docker.io/woodpeckerci/woodpecker-server"},
}

// installerSources are where Sidero Labs publishes Talos installers: the
// stock installer, and the Image Factory's per-schematic installers
// (factory.talos.dev/installer/<schematic id>, a sha256 in hex).
var installerSources = regexp.MustCompile(`^(ghcr\.io/siderolabs/installer|factory\.talos\.dev/installer(-secureboot)?/[0-9a-f]{64})$`)

// checkProvenance is the provenance rule: the installer, the hardened
// profiles' images and the recorded charts are held against their
// published sources.
func (c *Config) checkProvenance(p *problems) {
	if c.StartAt != LayerApps {
		checkInstallerSource(p, Key("cluster.installImage"), c.Cluster.InstallImage)
	}
	if s := c.Storage; s.On() {
		checkChartSource(p, Key("storage")+".chart", s.Chart)
	}
	if c.LBOn() {
		checkChartSource(p, Key("loadBalancer")+".chart", c.LoadBalancer.Chart)
	}
	for i, a := range c.Apps {
		ap := fmt.Sprintf("%s[%d]", Key("apps"), i)
		checkChartSource(p, ap+".chart", a.Chart)
		var images []recordedImage
		if a.Vault != nil {
			images = vaultImages
		}
		if a.Woodpecker != nil {
			images = woodpeckerImages
		}
		for _, img := range images {
			checkImageSource(p, ap+".values.", a.Values, img)
		}
	}
}

// checkInstallerSource refuses an installer referenced by tag from
// anywhere but Sidero Labs' registries. A digest pins the content itself,
// so a digest-pinned installer may come from a site's own registry.
// checkInstallImage (validate_hostile.go) reports a malformed or floating
// reference.
func checkInstallerSource(p *problems, at, img string) {
	if !imageRef.MatchString(img) || strings.Contains(img, "@sha256:") {
		return
	}
	repo := img
	if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
		repo = img[:i]
	}
	if !installerSources.MatchString(canonicalImage(repo)) {
		p.addf(at, "%q is not a Talos installer as Sidero Labs publishes it (ghcr.io/siderolabs/installer or factory.talos.dev/installer/<schematic>); an installer from another registry is pinned by digest (<registry>/<repository>@sha256:...)", img)
	}
}

// checkChartSource refuses a chart PublishedCharts records (by name) at
// another source. A local chart (chart.path) is the project's own. Whether
// the version is published there is asked of the source at preview (the
// pipeline's charts-published rule).
func checkChartSource(p *problems, at string, ch ChartConfig) {
	i := slices.IndexFunc(PublishedCharts, func(pc PublishedChart) bool { return pc.Name == ch.Name })
	if ch.Path != "" || i < 0 {
		return
	}
	pc := PublishedCharts[i]
	if ch.Repo != pc.Repo {
		p.addf(at+".repo", "%q is not where the %s chart is published (%s): a look-alike host or another registry can serve anything under that name; keep %s here and fetch it through milner:chartMirrors if the site has a mirror", ch.Repo, pc.Name, pc.Repo, pc.Repo)
	}
}

// checkImageSource refuses a value that moves a recorded image to another
// source. The tag stays the chart's business.
func checkImageSource(p *problems, vp string, values map[string]any, img recordedImage) {
	repo, repoSet := lookupPath(values, img.Repository)
	reg, regSet := any(nil), false
	if img.Registry != "" {
		reg, regSet = lookupPath(values, img.Registry)
	}
	if !repoSet && !regSet {
		return
	}
	at := vp + img.Repository
	if !repoSet {
		at = vp + img.Registry
	}
	full := ""
	switch {
	case img.Registry == "":
		full = fmt.Sprint(repo)
	case !repoSet:
		full = fmt.Sprint(reg) + "/" + strings.SplitN(img.Source, "/", 2)[1]
	case !regSet:
		full = "docker.io/" + fmt.Sprint(repo)
	default:
		full = strings.TrimSuffix(fmt.Sprint(reg), "/") + "/" + fmt.Sprint(repo)
	}
	if canonicalImage(full) != img.Source {
		p.addf(at, "moves the image to %q: it is published as %s; the chart's image stays where its makers publish it", full, img.Source)
	}
}

// canonicalImage writes a repository reference as its registry host and
// path: a first segment without '.', ':' or "localhost" is a Docker Hub
// path (the container runtimes' rule), and index.docker.io is docker.io.
func canonicalImage(ref string) string {
	first, rest, found := strings.Cut(ref, "/")
	if !found || !strings.ContainsAny(first, ".:") && first != "localhost" {
		return "docker.io/" + ref
	}
	if first == "index.docker.io" || first == "registry-1.docker.io" {
		return "docker.io/" + rest
	}
	return ref
}
