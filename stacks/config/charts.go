package config

import "slices"

// PublishedChart is where a chart's maintainers publish it: the repository
// (an https:// chart repository or an oci:// registry path) and the chart
// name under it, with the versions known to be published there. A stack's
// chart coordinates (ChartConfig Repo, Name, Version) are these; a mirror
// only says where to fetch them.
type PublishedChart struct {
	// Name is the chart name.
	Name string
	// Repo is the published source.
	Repo string
	// Versions are the versions the maintainers published there that Milner
	// knows of: each is an upstream release tag at which the evidence below
	// holds (the pinned version and one newer, for upgrades).
	Versions []string
}

// PublishedCharts records, per chart the program can install by default,
// the source its maintainers publish it to. The evidence, at each pinned tag:
var PublishedCharts = []PublishedChart{
	// hashicorp/vault-helm README.md at v0.29.1 (272d04ee) and v0.30.1
	// (d733785f): "helm repo add hashicorp https://helm.releases.hashicorp.com".
	{Name: VaultChart, Repo: "https://helm.releases.hashicorp.com", Versions: []string{"0.29.1", "0.30.1"}},
	// woodpecker-ci/helm .woodpecker/release.yml at 3.2.0 (454fad2c) and
	// 3.2.1 (9c2ff60f), step release-chart-ghcr: "helm push
	// /tmp/woodpecker-${CI_COMMIT_TAG}.tgz oci://ghcr.io/woodpecker-ci/helm"
	// (Helm appends the chart name: oci://ghcr.io/woodpecker-ci/helm/woodpecker).
	{Name: WoodpeckerChart, Repo: "oci://ghcr.io/woodpecker-ci/helm", Versions: []string{"3.2.0", "3.2.1"}},
	// rancher/local-path-provisioner .github/workflows/helm-release.yml at
	// v0.0.33 (749f0973) and v0.0.34 (af49f3fd): "helm push ./chart/*.tgz
	// oci://${{ env.HELM_REGISTRY }}/${{ github.repository_owner }}/${{
	// github.event.repository.name }}/charts" with HELM_REGISTRY ghcr.io and
	// the chart version the tag without its "v". The repository has no Pages
	// branch: https://rancher.github.io/local-path-provisioner serves no
	// chart repository (its issue #89, "Publish Helm chart in a chart
	// repository", is open).
	{Name: StorageChartName, Repo: "oci://ghcr.io/rancher/local-path-provisioner/charts", Versions: []string{"0.0.33", "0.0.34"}},
	// metallb/metallb at v0.16.1 (fafdcee2): its installation guide
	// (website/content/installation/_index.md, "Installation with Helm"):
	// "helm repo add metallb https://metallb.github.io/metallb"; the
	// chart's own Chart.yaml names the frr-k8s subchart's repository beside
	// it, https://metallb.github.io/frr-k8s. One version known: no newer
	// archive is in the chart mirror the tests read.
	{Name: LoadBalancerChartName, Repo: "https://metallb.github.io/metallb", Versions: []string{"0.16.1"}},
}

// StorageChartName is local-path-provisioner's chart name.
const StorageChartName = "local-path-provisioner"

// Published reports whether a chart of a repository is recorded as
// published at exactly that source and version.
func Published(c ChartConfig) bool {
	return slices.ContainsFunc(PublishedCharts, func(p PublishedChart) bool {
		return p.Name == c.Name && p.Repo == c.Repo && slices.Contains(p.Versions, c.Version)
	})
}
