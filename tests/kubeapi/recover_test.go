//go:build integration

package kubeapi

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/milner/milner/internal/appsadopt"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/stacks/config"
)

// TestAppsAdoptAfterLostState installs the real charts (Vault, Woodpecker,
// local-path-provisioner, through milner:chartMirrors) and the workloads
// with `milner up`, deletes the stack's whole state, and recovers it as
// docs/runbooks/recover.md says: `milner adopt --all`. It asserts the plan
// of the next preview (no create, no replace, no delete of anything, no
// update of a release), that the first up after it runs no Helm upgrade
// (every release keeps its revision) and recreates no StatefulSet,
// Deployment or PVC (same uids), that a value changed afterwards upgrades
// exactly that release, and that a release of the stack's name from
// another chart is refused, naming both charts.
//
//   - Recovery of the apps layer after lost state (`tests/kubeapi`
//     TestAppsAdoptAfterLostState, 45.9 s here): the real charts through the
//     mirror, the stack's state deleted, `milner adopt --all`. The next preview
//     plans no create, replace, delete or import, and no release update; the
//     four Namespaces show a one-time server-side-apply update. The first up
//     keeps every release at revision 1 and every StatefulSet, Deployment, PVC
//     and program object uid; then a no-op preview. A value changed upgrades
//     only vault (revision 2). A release of another chart is refused naming both
//     charts, and nothing is left in state. It fails with the run-input
//     recording (`Complete`) reverted (release updates planned) and with the
//     adoption skipped (creates planned). Unit tests: `internal/appsadopt`,
//     `stacks` TestAdoptImportsExactlyTheNamedObjects.
func TestAppsAdoptAfterLostState(t *testing.T) {
	mirror := startChartMirror(t, chartsDir(t))
	api := startAPIServer(t)
	api.startControllerManager()
	vault := app{Name: "vault", Namespace: "vault", PodSecurity: "baseline",
		Chart: publishedChart(t, config.VaultChart, "0.29.1"), Values: map[string]any{},
		Vault: map[string]any{"replicas": 1, "dataSize": "1Gi", "auditSize": "1Gi"}}
	woodpecker := app{Name: "woodpecker", Namespace: "woodpecker", PodSecurity: "baseline",
		Chart:  publishedChart(t, config.WoodpeckerChart, "3.2.0"),
		Values: map[string]any{"agent": map[string]any{"replicaCount": 1}},
		Woodpecker: map[string]any{
			"host": "https://ci.example.org", "admins": []any{"alice"},
			"forge": map[string]any{"kind": "forgejo", "url": forgeURL()},
		}}
	s := newAppsScenario(t, api, vault, woodpecker)
	s.storage = map[string]any{"chart": publishedChart(t, config.StorageChartName, config.DefaultStorageChart.Version)}
	s.mirrors = mirror.Mirrors
	s.apply()
	releases := map[string]string{ // release -> namespace
		"vault": "vault", "woodpecker": "woodpecker", config.StorageAppName: config.DefaultStorageNamespace,
	}
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		t.Logf("SCENARIO %s: ok in %s", what, time.Since(start).Round(time.Millisecond))
	}

	timed("install from empty", func() { s.up("install") })
	waitForControllers(t, api, []string{"vault", "woodpecker", config.DefaultStorageNamespace})
	revisions := map[string]int{"vault": 1, "woodpecker": 1, config.StorageAppName: 1}
	requireRevisions := func(what string) {
		t.Helper()
		for rel, want := range revisions {
			if r := s.release(releases[rel], rel); r.revision != want || r.status != "deployed" {
				t.Fatalf("%s: release %s: want revision %d deployed, got %+v", what, rel, want, r)
			}
		}
	}
	requireRevisions("install")
	// Every object whose uid must survive: the charts' workloads and the
	// program's own objects.
	paths := []string{
		"/apis/apps/v1/namespaces/vault/statefulsets/vault",
		"/apis/apps/v1/namespaces/woodpecker/statefulsets/woodpecker-server",
		"/apis/apps/v1/namespaces/" + config.DefaultStorageNamespace + "/deployments/" + config.StorageAppName,
		"/api/v1/namespaces/vault", "/api/v1/namespaces/woodpecker", "/api/v1/namespaces/evolved-npcs",
		"/api/v1/namespaces/evolved-npcs/resourcequotas/evolved-npcs-quota",
		"/api/v1/namespaces/evolved-npcs/limitranges/evolved-npcs-limits",
		"/apis/scheduling.k8s.io/v1/priorityclasses/evolved-npcs",
		"/apis/storage.k8s.io/v1/storageclasses/local-path",
	}
	uids := map[string]string{}
	for _, p := range paths {
		uids[p] = s.uid(p)
	}
	claims := claimUIDs(t, api, "vault", "woodpecker")
	requireSame := func(what string) {
		t.Helper()
		for p, want := range uids {
			if got := s.uid(p); got != want {
				t.Fatalf("%s: %s was recreated: uid %s -> %s", what, p, want, got)
			}
		}
		if got := claimUIDs(t, api, "vault", "woodpecker"); mustJSON(t, got) != mustJSON(t, claims) {
			t.Fatalf("%s: PVCs changed: %v -> %v", what, claims, got)
		}
		requireNoFailedCreate(t, api)
	}

	loseState := func() {
		t.Helper()
		state := strings.TrimPrefix(s.backend, "file://")
		if err := os.RemoveAll(state); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(state, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	timed("lost state", func() {
		loseState()
		// What the runbook's up would do without the adoption: create
		// every release and object the cluster holds.
		creates := 0
		for _, st := range s.preview("lost state").Steps {
			if st.Op == apitype.OpCreate && st.Type == appsadopt.TypeRelease {
				creates++
			}
		}
		if creates != len(releases) {
			t.Fatalf("lost state: want the preview to create the %d releases, it creates %d", len(releases), creates)
		}
	})

	timed("adopt --all", func() {
		code, out := s.milner("adopt", "--all")
		if code != 0 {
			t.Fatalf("adopt --all: exit %d:\n%s", code, out)
		}
		requireRevisions("adopt")
		requireSame("adopt")
		requireRecoveredPlan(t, "after adopt", s.preview("after adopt"))
	})

	timed("first up after the adoption", func() {
		s.up("first up after adopt")
		requireRevisions("first up after adopt")
		requireSame("first up after adopt")
		requireChanges(t, "no-op after the recovery", s.preview("no-op after the recovery"))
	})

	timed("one value changed in one release", func() {
		s.apps[0].Values["server"] = map[string]any{"logLevel": "debug"}
		s.apply()
		requireChanges(t, "value changed", s.preview("value changed"), "update vault-release")
		s.up("value changed")
		revisions["vault"]++
		requireRevisions("value changed")
		requireSame("value changed")
	})

	timed("another chart's release refused", func() {
		loseState()
		// The stack now declares the storage release from the stand-in
		// chart: the live release of that name is local-path-provisioner's.
		s.storage = map[string]any{"chart": map[string]any{"path": storageChart}}
		s.apply()
		code, out := s.milner("adopt", "--all")
		if code == 0 {
			t.Fatalf("adopt of another chart's release: exit 0:\n%s", out)
		}
		for _, want := range []string{"is chart local-path-provisioner " + config.DefaultStorageChart.Version, "the stack declares chart milner-storage-test", "nothing was changed"} {
			if !strings.Contains(out, want) {
				t.Errorf("adopt of another chart's release: output lacks %q:\n%s", want, out)
			}
		}
		res, err := s.stack.Resources(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if strings.HasPrefix(r.Type, "kubernetes:") {
				t.Errorf("the refused adoption left %s in state", r.Name())
			}
		}
		requireRevisions("refused")
		requireSame("refused")
	})
}

// requireRecoveredPlan fails unless the preview after an adoption plans
// no create, no replace, no delete and no import of anything, and no
// update of a Helm release (an update runs a Helm upgrade).
func requireRecoveredPlan(t *testing.T, what string, r *engine.Result) {
	t.Helper()
	for _, st := range r.Changes() {
		switch {
		case st.Op == apitype.OpUpdate && st.Type != appsadopt.TypeRelease:
			// An object imported as the cluster holds it, updated in place
			// to the stack's declaration (server-side apply: same uid).
			t.Logf("%s: update %s %v", what, st.Name(), st.Diffs)
		default:
			t.Errorf("%s: plans %s %s %v", what, st.Op, st.Name(), st.Diffs)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}
