package upgrade

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/semver"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/stacks/config"
)

// devDeclared is the dev stack moved to today's Talos: three control
// planes.
func devDeclared(talos, kube string) Declared {
	d := Declared{TalosVersion: talos, KubernetesVersion: kube, InstallImage: config.DefaultInstallImage(talos), KubernetesEndpoint: "https://10.73.0.240:6443"}
	for i := 1; i <= 3; i++ {
		d.Nodes = append(d.Nodes, Node{Name: fmt.Sprintf("cp-%d", i), Role: vocab.RoleControlPlane, Endpoint: fmt.Sprintf("10.73.0.1%d", i)})
	}
	return d
}

// rowsAt are the nodes of d all running talos and kube.
func rowsAt(d Declared, talos, kube string) []Row {
	var rows []Row
	for _, n := range d.Nodes {
		rows = append(rows, Row{Node: n, Talos: talos, Kubelet: kube, APIServer: kube})
	}
	return rows
}

// describe is a plan's stages, one line each.
func describe(stages []Stage) []string {
	var out []string
	for _, st := range stages {
		if k := st.Kubernetes; k != nil {
			out = append(out, "k8s "+k.From+" -> "+k.To)
			continue
		}
		var nodes []string
		for _, s := range st.Nodes {
			nodes = append(nodes, s.Node.Name+" "+s.From)
		}
		out = append(out, "talos "+st.Talos+" ("+strings.Join(nodes, ", ")+")")
	}
	return out
}

// TestPathFromTodaysMainToTodaysTalos: a cluster as today's main makes it
// (Talos v1.9.5, Kubernetes v1.32.3) moves to v1.13.9 and v1.36.3 through
// the latest patch of every minor, Kubernetes after each Talos minor to
// what that release defaults to, one minor at a time.
func TestPathFromTodaysMainToTodaysTalos(t *testing.T) {
	d := devDeclared("v1.13.9", "v1.36.3")
	stages, problems := planPath(d, rowsAt(d, "v1.9.5", "v1.32.3"))
	require.Empty(t, problems)
	assert.Equal(t, []string{
		"talos v1.9.6 (cp-1 v1.9.5, cp-2 v1.9.5, cp-3 v1.9.5)",
		"k8s v1.32.3 -> v1.32.4",
		"talos v1.10.9 (cp-1 v1.9.6, cp-2 v1.9.6, cp-3 v1.9.6)",
		"k8s v1.32.4 -> v1.33.6",
		"talos v1.11.6 (cp-1 v1.10.9, cp-2 v1.10.9, cp-3 v1.10.9)",
		"k8s v1.33.6 -> v1.34.1",
		"talos v1.12.11 (cp-1 v1.11.6, cp-2 v1.11.6, cp-3 v1.11.6)",
		"k8s v1.34.1 -> v1.35.4",
		"talos v1.13.9 (cp-1 v1.12.11, cp-2 v1.12.11, cp-3 v1.12.11)",
		"k8s v1.35.4 -> v1.36.3",
	}, describe(stages))
	for _, st := range stages {
		if st.Kubernetes == nil {
			assert.Equal(t, "ghcr.io/siderolabs/installer:"+st.Talos, st.Image)
		}
	}
}

// TestPathNeverSkipsAMinor: whatever the start, consecutive Talos stages
// are adjacent minors (Talos tests configuration migration only between
// adjacent minors), and every Kubernetes stage moves at most one minor.
func TestPathNeverSkipsAMinor(t *testing.T) {
	for _, from := range []string{"v1.8.4", "v1.9.0", "v1.10.2", "v1.11.6", "v1.12.3"} {
		t.Run(from, func(t *testing.T) {
			d := devDeclared("v1.13.9", "v1.36.3")
			kube := "v1.32.3"
			if semver.Compare(from, "v1.11.0") >= 0 {
				kube = "v1.34.1"
			}
			stages, problems := planPath(d, rowsAt(d, from, kube))
			require.Empty(t, problems)
			minor := semver.MajorMinor(from)
			for _, st := range stages {
				if k := st.Kubernetes; k != nil {
					assert.Contains(t, []string{semver.MajorMinor(k.From), config.NextMinor(semver.MajorMinor(k.From))}, semver.MajorMinor(k.To), "%s -> %s", k.From, k.To)
					continue
				}
				m := semver.MajorMinor(st.Talos)
				assert.Contains(t, []string{minor, config.NextMinor(minor)}, m, "a stage from %s to %s skips a minor", minor, st.Talos)
				minor = m
			}
			assert.Equal(t, "v1.13", minor)
		})
	}
}

// TestPathResumesWhereAStopLeftIt: after a stop half way (cp-1 on v1.11.6,
// the others on v1.10.9), the rerun plans only what is left.
func TestPathResumesWhereAStopLeftIt(t *testing.T) {
	d := devDeclared("v1.13.9", "v1.36.3")
	rows := rowsAt(d, "v1.10.9", "v1.33.6")
	rows[0].Talos = "v1.11.6"
	stages, problems := planPath(d, rows)
	require.Empty(t, problems)
	assert.Equal(t, "talos v1.11.6 (cp-2 v1.10.9, cp-3 v1.10.9)", describe(stages)[0])
	assert.Equal(t, "k8s v1.33.6 -> v1.34.1", describe(stages)[1])
	assert.Len(t, stages, 6)
}

// TestPathOfAPatchRelease: within a minor, one Talos stage and no
// Kubernetes change; nodes already there are left alone.
func TestPathOfAPatchRelease(t *testing.T) {
	d := devDeclared("v1.13.9", "v1.36.3")
	rows := rowsAt(d, "v1.13.2", "v1.36.3")
	rows[1].Talos = "v1.13.9"
	stages, problems := planPath(d, rows)
	require.Empty(t, problems)
	assert.Equal(t, []string{"talos v1.13.9 (cp-1 v1.13.2, cp-3 v1.13.2)"}, describe(stages))
	assert.Empty(t, func() []Stage { s, _ := planPath(d, rowsAt(d, "v1.13.9", "v1.36.3")); return s }(), "nothing to do")
}

// TestPathKeepsAFactorySchematic: a declared image factory installer
// keeps its schematic at every stage; a digest cannot be re-tagged.
func TestPathKeepsAFactorySchematic(t *testing.T) {
	d := devDeclared("v1.13.9", "v1.36.3")
	schematic := "factory.talos.dev/installer/" + strings.Repeat("a", 64)
	d.InstallImage = schematic + ":v1.13.9"
	stages, problems := planPath(d, rowsAt(d, "v1.12.11", "v1.35.4"))
	require.Empty(t, problems)
	assert.Equal(t, schematic+":v1.13.9", stages[0].Image)

	stages, problems = planPath(d, rowsAt(d, "v1.11.6", "v1.34.1"))
	require.Empty(t, problems)
	assert.Equal(t, schematic+":v1.12.11", stages[0].Image)

	d.InstallImage = schematic + "@sha256:" + strings.Repeat("b", 64)
	_, problems = planPath(d, rowsAt(d, "v1.11.6", "v1.34.1"))
	assert.Contains(t, strings.Join(problems, "\n"), "cannot be derived")
}

// TestPathRefusals: what no path reaches is refused before anything runs.
func TestPathRefusals(t *testing.T) {
	tests := []struct {
		name        string
		talos, kube string // declared
		from, fromK string // running
		want        string
	}{
		{"a minor outside the table", "v1.14.0", "v1.36.3", "v1.13.9", "v1.36.3", "unsupported Talos v1.14: Milner supports Talos v1.9 to v1.13"},
		{"Kubernetes outside the target's range", "v1.13.9", "v1.37.0", "v1.13.9", "v1.36.3", "Talos v1.13 supports Kubernetes v1.31 to v1.36"},
		{"a downgrade across minors", "v1.12.11", "v1.35.4", "v1.13.9", "v1.35.4", `runs Talos v1.13.9, a newer minor than the declared v1.12.11`},
		{"a Kubernetes downgrade", "v1.13.9", "v1.35.4", "v1.13.9", "v1.36.3", "runs Kubernetes v1.36.3, newer than the declared v1.35.4: downgrades are refused"},
		{"too old to start", "v1.13.9", "v1.36.3", "v1.7.4", "v1.30.0", "more than one minor older than the oldest the supported-versions table knows"},
		{"a Kubernetes minor the table names no release of", "v1.12.11", "v1.35.4", "v1.12.11", "v1.30.5", "Kubernetes v1.30.5 -> v1.35.4 passes through v1.31"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := devDeclared(tt.talos, tt.kube)
			stages, problems := planPath(d, rowsAt(d, tt.from, tt.fromK))
			assert.Empty(t, stages)
			assert.Contains(t, strings.Join(problems, "\n"), tt.want)
		})
	}
}

// TestPlanWriteListsEachStageAndItsKubernetes: the preview of the path
// names every stage, the Kubernetes each Talos stage runs with and the
// range that minor takes.
func TestPlanWriteListsEachStageAndItsKubernetes(t *testing.T) {
	d := devDeclared("v1.13.9", "v1.36.3")
	stages, problems := planPath(d, rowsAt(d, "v1.11.6", "v1.34.1"))
	require.Empty(t, problems)
	var b strings.Builder
	(&Plan{Declared: d, Stages: stages}).Write(&b)
	out := b.String()
	assert.Contains(t, out, "4 stages, 6 node upgrades (each one reboot, health-gated), 2 Kubernetes upgrades")
	assert.Contains(t, out, "1. Talos v1.12.11 with ghcr.io/siderolabs/installer:v1.12.11, Kubernetes v1.34.1 (Talos v1.12 takes v1.30 to v1.35)")
	assert.Contains(t, out, "2. Kubernetes v1.34.1 -> v1.35.4")
	assert.Contains(t, out, "3. Talos v1.13.9 with ghcr.io/siderolabs/installer:v1.13.9, Kubernetes v1.35.4 (Talos v1.13 takes v1.31 to v1.36)")
	assert.Contains(t, out, "cp-2         controlplane v1.12.11 -> v1.13.9")
}
