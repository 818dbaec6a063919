package config

import "fmt"

// PublishedChart is where a chart's maintainers publish it: the repository
// (an https:// chart repository or an oci:// registry path) and the chart
// name under it. A stack's chart coordinates (ChartConfig Repo, Name,
// Version) are these; a mirror only says where to fetch them. Which
// versions are published is asked of the source itself when a stack is
// previewed (internal/chartindex; the pipeline's charts-published rule),
// so a chart bump is a change of the stack file alone.
type PublishedChart struct {
	// Name is the chart name.
	Name string
	// Repo is the published source.
	Repo string
}

// PublishedCharts records, per chart the program can install by default,
// the source its maintainers publish it to. The evidence, at each pinned tag:
var PublishedCharts = []PublishedChart{
	// hashicorp/vault-helm README.md at v0.29.1 (272d04ee) and v0.30.1
	// (d733785f): "helm repo add hashicorp https://helm.releases.hashicorp.com".
	{Name: VaultChart, Repo: "https://helm.releases.hashicorp.com"},
	// woodpecker-ci/helm .woodpecker/release.yml at 3.2.0 (454fad2c) and
	// 3.2.1 (9c2ff60f), step release-chart-ghcr: "helm push
	// /tmp/woodpecker-${CI_COMMIT_TAG}.tgz oci://ghcr.io/woodpecker-ci/helm"
	// (Helm appends the chart name: oci://ghcr.io/woodpecker-ci/helm/woodpecker).
	{Name: WoodpeckerChart, Repo: "oci://ghcr.io/woodpecker-ci/helm"},
	// rancher/local-path-provisioner .github/workflows/helm-release.yml at
	// v0.0.33 (749f0973) and v0.0.34 (af49f3fd): "helm push ./chart/*.tgz
	// oci://${{ env.HELM_REGISTRY }}/${{ github.repository_owner }}/${{
	// github.event.repository.name }}/charts" with HELM_REGISTRY ghcr.io and
	// the chart version the tag without its "v". The repository has no Pages
	// branch: https://rancher.github.io/local-path-provisioner serves no
	// chart repository (its issue #89, "Publish Helm chart in a chart
	// repository", is open).
	{Name: StorageChartName, Repo: "oci://ghcr.io/rancher/local-path-provisioner/charts"},
	// metallb/metallb at v0.16.1 (fafdcee2): its installation guide
	// (website/content/installation/_index.md, "Installation with Helm"):
	// "helm repo add metallb https://metallb.github.io/metallb"; the
	// chart's own Chart.yaml names the frr-k8s subchart's repository beside
	// it, https://metallb.github.io/frr-k8s.
	{Name: LoadBalancerChartName, Repo: "https://metallb.github.io/metallb"},
}

// StorageChartName is local-path-provisioner's chart name.
const StorageChartName = "local-path-provisioner"

// ChartAt is a chart the stack installs and the config path of its
// coordinates.
type ChartAt struct {
	// Path is the chart's config path, e.g. milner:apps[0].chart.
	Path string
	// Chart is the chart.
	Chart ChartConfig
}

// RemoteCharts are the charts the stack fetches from a repository (not a
// local chart.path), each with its config path: the storage layer's, then
// every app's, in config order.
func (c *Config) RemoteCharts() []ChartAt {
	var out []ChartAt
	if c.Storage.On() && c.Storage.Chart.Path == "" {
		out = append(out, ChartAt{Path: Key("storage") + ".chart", Chart: c.Storage.Chart})
	}
	for i, a := range c.Apps {
		if a.Chart.Path == "" {
			out = append(out, ChartAt{Path: fmt.Sprintf("%s[%d].chart", Key("apps"), i), Chart: a.Chart})
		}
	}
	return out
}
