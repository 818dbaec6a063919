package upgrade

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/milner/milner/stacks/config"
)

// The upgrade path. Talos' "Upgrading Talos Linux" guide: configuration
// "migration is only tested between adjacent minor releases. Thus the
// recommended upgrade path is to always upgrade to the latest patch
// release of all intermediate minor releases" (from 1.0 to 1.2.4: the
// latest 1.0, then the latest 1.1, then 1.2.4). The latest patch of each
// minor is the supported-versions table's (config.Supported).
//
// Kubernetes moves one minor per upgrade-k8s run: the upgrade path
// go-kubernetes accepts is "1.N->1.N" or "1.N->1.N+1" only
// (kubernetes/upgrade.Path.IsSupported). After each Talos minor the path
// takes Kubernetes to the version that Talos release defaults to (the
// table's kubernetes column, never past the declared version), so every
// pair of versions the cluster passes through is one Talos shipped with.

// Stage is one step of the path: a Talos stage moves every node below its
// version to it, one node at a time; a Kubernetes stage is one
// upgrade-k8s run.
type Stage struct {
	// Talos is the version a Talos stage moves nodes to ("" for a
	// Kubernetes stage).
	Talos string
	// Image is the installer of a Talos stage.
	Image string
	// Nodes are the nodes a Talos stage upgrades, in upgrade order.
	Nodes []Step
	// Kubernetes is a Kubernetes stage (nil for a Talos stage).
	Kubernetes *KubernetesStep
}

// planPath plans the stages that take the nodes of rows (every one
// answered) to the declared versions, or says why no path exists. A
// rerun after a stop plans the rest: nodes already past a stage are not
// in it.
func planPath(d Declared, rows []Row) ([]Stage, []string) {
	target, err := config.TalosRow(d.TalosVersion)
	if err != nil {
		return nil, []string{fmt.Sprintf("milner:cluster.talosVersion: %v", err)}
	}
	if err := target.SupportsKubernetes(d.KubernetesVersion); err != nil {
		return nil, []string{fmt.Sprintf("milner:cluster.kubernetesVersion: %v", err)}
	}
	running := map[string]string{} // node -> Talos it runs, as the path moves it
	lowest := ""
	for _, r := range rows {
		running[r.Node.Name] = r.Talos
		if lowest == "" || semver.Compare(r.Talos, lowest) < 0 {
			lowest = r.Talos
		}
	}
	kube := lowestKubernetes(rows)
	var problems []string
	for _, r := range rows {
		if semver.Compare(semver.MajorMinor(r.Talos), target.Minor) > 0 {
			problems = append(problems, fmt.Sprintf("node %q runs Talos %s, a newer minor than the declared %s: Milner plans no downgrade across minors", r.Node.Name, r.Talos, d.TalosVersion))
		}
		for _, v := range []string{r.Kubelet, r.APIServer} {
			if v != "" && semver.Compare(v, d.KubernetesVersion) > 0 {
				problems = append(problems, fmt.Sprintf("node %q runs Kubernetes %s, newer than the declared %s: downgrades are refused", r.Node.Name, v, d.KubernetesVersion))
			}
		}
	}
	talosPath, err := talosVersions(lowest, d.TalosVersion)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return nil, problems
	}

	var stages []Stage
	for i, v := range talosPath {
		row, _ := config.TalosRow(v) // every version on the path is in the table
		if kube != "" {
			if err := row.SupportsKubernetes(kube); err != nil {
				return nil, []string{fmt.Sprintf("before Talos %s: Kubernetes %s runs, and %v; move Kubernetes first", v, kube, err)}
			}
		}
		image, err := installerFor(d, v)
		if err != nil {
			return nil, []string{err.Error()}
		}
		st := Stage{Talos: v, Image: image}
		for _, n := range d.upgradeOrder() {
			if from := running[n.Name]; semver.Compare(from, v) < 0 {
				st.Nodes = append(st.Nodes, Step{Node: n, From: from, To: v})
				running[n.Name] = v
			}
		}
		if len(st.Nodes) > 0 {
			stages = append(stages, st)
		}
		// Then Kubernetes, to what this release defaults to; the declared
		// version after the last Talos stage.
		want := d.KubernetesVersion
		if i < len(talosPath)-1 && semver.Compare(semver.MajorMinor(row.Kubernetes), semver.MajorMinor(d.KubernetesVersion)) < 0 {
			want = row.Kubernetes
		}
		ks, err := kubernetesHops(d, kube, want, row)
		if err != nil {
			return nil, []string{err.Error()}
		}
		stages = append(stages, ks...)
		if len(ks) > 0 {
			kube = want
		}
	}
	if len(talosPath) == 0 {
		ks, err := kubernetesHops(d, kube, d.KubernetesVersion, target)
		if err != nil {
			return nil, []string{err.Error()}
		}
		stages = append(stages, ks...)
	}
	return stages, nil
}

// talosVersions are the Talos versions from the lowest a node runs to the
// declared one: the latest patch of the lowest minor (if the table has
// that minor and the node is below it), the latest of every minor
// between, then the declared version; none when the lowest is the
// declared.
func talosVersions(lowest, declared string) ([]string, error) {
	if lowest == declared {
		return nil, nil
	}
	from, to := semver.MajorMinor(lowest), semver.MajorMinor(declared)
	if from == to {
		if semver.Compare(lowest, declared) > 0 {
			return nil, nil // nodes newer within the minor stay; the lower ones move
		}
		return []string{declared}, nil
	}
	oldest := config.Supported[0]
	if semver.Compare(from, oldest.Minor) < 0 && semver.Compare(semver.MajorMinor(lowest), config.PrevMinor(oldest.Minor)) != 0 {
		return nil, fmt.Errorf("a node runs Talos %s, more than one minor older than the oldest the supported-versions table knows (%s, %s): upgrade it to the latest %s first (talosctl upgrade)", lowest, oldest.Minor, config.SupportedVersionsFile, config.PrevMinor(oldest.Minor))
	}
	var out []string
	for _, r := range config.Supported {
		switch c := semver.Compare(r.Minor, from); {
		case c == 0 && semver.Compare(lowest, r.Latest) < 0:
			out = append(out, r.Latest)
		case c > 0 && semver.Compare(r.Minor, to) < 0:
			out = append(out, r.Latest)
		}
	}
	return append(out, declared), nil
}

// kubernetesHops are the upgrade-k8s runs from version kube to want on
// Talos row, one minor each: an intermediate minor goes to the table's
// Kubernetes version of that minor. None when kube is want or newer.
func kubernetesHops(d Declared, kube, want string, row config.TalosMinor) ([]Stage, error) {
	if kube == "" || semver.Compare(kube, want) >= 0 {
		return nil, nil
	}
	var hops []string
	for m := config.NextMinor(semver.MajorMinor(kube)); semver.Compare(m, semver.MajorMinor(want)) < 0; m = config.NextMinor(m) {
		i := slices.IndexFunc(config.Supported, func(r config.TalosMinor) bool { return semver.MajorMinor(r.Kubernetes) == m })
		if i < 0 {
			return nil, fmt.Errorf("moving Kubernetes %s -> %s passes through %s, and the supported-versions table (%s) names no %s release: move Kubernetes to %s first (talosctl upgrade-k8s, one minor at a time)",
				kube, want, m, config.SupportedVersionsFile, m, semver.MajorMinor(config.Supported[0].Kubernetes))
		}
		hops = append(hops, config.Supported[i].Kubernetes)
	}
	hops = append(hops, want)
	cps := d.controlPlanes()
	if len(cps) == 0 {
		return nil, fmt.Errorf("moving Kubernetes %s -> %s: no control plane to drive upgrade-k8s through", kube, want)
	}
	var out []Stage
	from := kube
	for _, h := range hops {
		if err := row.SupportsKubernetes(h); err != nil {
			return nil, fmt.Errorf("moving to Kubernetes %s on Talos %s: %w", h, row.Minor, err)
		}
		out = append(out, Stage{Kubernetes: &KubernetesStep{From: from, To: h, Via: cps[0], Endpoint: d.KubernetesEndpoint}})
		from = h
	}
	return out, nil
}

// lowestKubernetes is the lowest Kubernetes version a kubelet or
// kube-apiserver of rows runs, as upgrade-k8s detects the version to
// upgrade from ("" when none is known).
func lowestKubernetes(rows []Row) string {
	lowest := ""
	for _, r := range rows {
		for _, v := range []string{r.Kubelet, r.APIServer} {
			if semver.IsValid(v) && (lowest == "" || semver.Compare(v, lowest) < 0) {
				lowest = v
			}
		}
	}
	return lowest
}

// installerFor is the installer image of Talos version v: the declared
// installer (milner:cluster.installImage, its tag the declared version)
// with v's tag, so an image factory schematic is kept at every stage.
func installerFor(d Declared, v string) (string, error) {
	if v == d.TalosVersion {
		return d.InstallImage, nil
	}
	repo, tag, ok := cutTag(d.InstallImage)
	if !ok || tag != d.TalosVersion {
		return "", fmt.Errorf("milner:cluster.installImage %q is not tagged with talosVersion %s: the installers of the path's intermediate versions cannot be derived from it; declare each intermediate version in turn", d.InstallImage, d.TalosVersion)
	}
	return repo + ":" + v, nil
}

// cutTag splits an image reference into repository and tag (false for a
// digest or no tag).
func cutTag(image string) (repo, tag string, ok bool) {
	if strings.Contains(image, "@") {
		return "", "", false
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return "", "", false
	}
	return image[:i], image[i+1:], true
}

// UniformPath is the upgrade path of a cluster whose every node runs
// talos and kube, to the declared versions of d: what docs/compatibility.md
// shows (the nodes' names do not matter to it).
func UniformPath(d Declared, talos, kube string) ([]Stage, error) {
	var rows []Row
	for _, n := range d.Nodes {
		rows = append(rows, Row{Node: n, Talos: talos, Kubelet: kube, APIServer: kube})
	}
	stages, problems := planPath(d, rows)
	if len(problems) > 0 {
		return nil, fmt.Errorf("no upgrade path: %s", strings.Join(problems, "; "))
	}
	return stages, nil
}
