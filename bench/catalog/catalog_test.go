// Package catalog_test is the delta precision catalog: single-value changes
// to a stack's config, each with exactly the steps it must plan and nothing
// else. Under mocks (this file, part of `go test ./...`) a step is derived by
// comparing the registrations of two runs of the program: a resource whose
// inputs changed (outside its ignoreChanges) is an update, or a replace when
// its replaceOnChanges covers the change; a new logical name is a create, a
// missing one a delete. With -tags benchengine (catalog_engine_test.go) the
// substrate changes are previewed on the real engine against libvirt.
package catalog_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/offlinetest"
)

// obj is a config object as a stack file holds it.
type obj = map[string]any

// step is one planned step: op (create, update, replace, delete) of the
// resource of logical name name.
type step struct{ op, name string }

func (s step) String() string { return s.op + " " + s.name }

// change is one catalog entry.
type change struct {
	name string
	// edit changes exactly one value of the base config.
	edit func(c obj)
	// want are exactly the steps the change must plan.
	want []step
	// substrate marks a substrate change: previewed on the real engine
	// with -tags benchengine, under mocks otherwise.
	substrate bool
}

// Logical names of the base config's resources.
const (
	cluster = "bench-cat"
	release = "vault-release"
)

// baseConfig is a four-node libvirt cluster (three control planes, one
// worker) with one app, every layer declared.
func baseConfig() obj {
	node := func(name, role, addr, mac string, mem int) obj {
		return obj{"name": name, "role": role, "vcpu": 1, "memoryMiB": mem, "osDiskGiB": 10, "dataDiskGiB": 1, "address": addr, "mac": mac}
	}
	return obj{
		"cluster":   obj{"name": cluster, "talosVersion": "v1.9.5", "configContract": "v1.9", "kubernetesVersion": "v1.32.3", "vip": "10.201.250.240"},
		"substrate": obj{"kind": "libvirt", "libvirt": obj{"domainType": "qemu", "poolPath": "/var/lib/milner-bench/" + cluster}},
		"network": obj{
			"mode": "isolated", "cidr": "10.201.250.0/24",
			"dhcpRange": obj{"start": "10.201.250.100", "end": "10.201.250.199"},
		},
		"nodes": []any{
			node("cp-1", "controlplane", "10.201.250.11", "52:54:00:c9:fa:11", 2048),
			node("cp-2", "controlplane", "10.201.250.12", "52:54:00:c9:fa:12", 2048),
			node("cp-3", "controlplane", "10.201.250.13", "52:54:00:c9:fa:13", 2048),
			node("w-1", "worker", "10.201.250.21", "52:54:00:c9:fa:21", 1024),
		},
		"apps": []any{obj{
			"name":  "vault",
			"chart": obj{"repo": "https://helm.releases.hashicorp.com", "name": "vault", "version": "0.29.1"},
			"vault": obj{"replicas": 1, "dataSize": "1Gi"},
			"values": obj{
				"ui":     obj{"enabled": true},
				"server": obj{"extraLabels": obj{"team": "platform"}},
			},
		}},
	}
}

// at walks a path of map keys and list indexes into c.
var at = offlinetest.At

// Steps the per-node changes plan.
func nodeSteps(op, node string) []step {
	return []step{
		{op, cluster + "-" + node}, {op, cluster + "-" + node + "-os"}, {op, cluster + "-" + node + "-data"},
		{op, node}, {op, node + "-apply"},
	}
}

// catalog is the list of single-value changes.
func catalog() []change {
	return []change{
		{name: "node memory", substrate: true,
			edit: func(c obj) { at(c, "nodes", 1)["memoryMiB"] = 3072 },
			want: []step{{"replace", cluster + "-cp-2"}}},
		{name: "node vCPU", substrate: true,
			edit: func(c obj) { at(c, "nodes", 1)["vcpu"] = 2 },
			want: []step{{"replace", cluster + "-cp-2"}}},
		{name: "node added", substrate: true,
			edit: func(c obj) {
				c["nodes"] = append(c["nodes"].([]any), obj{"name": "w-2", "role": "worker", "vcpu": 1, "memoryMiB": 1024,
					"osDiskGiB": 10, "dataDiskGiB": 1, "address": "10.201.250.22", "mac": "52:54:00:c9:fa:22"})
			},
			want: nodeSteps("create", "w-2")},
		// The last worker leaving makes the control planes schedulable
		// (cluster.allowSchedulingOnControlPlanes defaults to true without
		// a worker): their configurations change in place, on purpose.
		{name: "node removed", substrate: true,
			edit: func(c obj) { c["nodes"] = c["nodes"].([]any)[:3] },
			want: append(nodeSteps("delete", "w-1"), step{"update", "cp-1-apply"}, step{"update", "cp-2-apply"}, step{"update", "cp-3-apply"})},
		{name: "Helm value",
			edit: func(c obj) { at(c, "apps", 0, "values", "ui")["enabled"] = false },
			want: []step{{"update", release}}},
		{name: "chart version",
			edit: func(c obj) { at(c, "apps", 0, "chart")["version"] = "0.30.1" },
			want: []step{{"update", release}}},
		{name: "label (a Helm values label)",
			edit: func(c obj) { at(c, "apps", 0, "values", "server", "extraLabels")["team"] = "infra" },
			want: []step{{"update", release}}},
		{name: "app added",
			edit: func(c obj) {
				c["apps"] = append(c["apps"].([]any), obj{"name": "podinfo",
					"chart": obj{"repo": "https://stefanprodan.github.io/podinfo", "name": "podinfo", "version": "6.7.1"}})
			},
			want: []step{{"create", "podinfo"}, {"create", "podinfo-ns"}, {"create", "podinfo-release"}}}, // an app owns its namespace
		// A node's address only reaches the node through its Talos patch:
		// the domain ignores it (LibvirtDomainNeverReadBack).
		{name: "Talos patch value (a node's address)",
			edit: func(c obj) { at(c, "nodes", 1)["address"] = "10.201.250.32" },
			want: []step{{"update", "cp-2-apply"}}},
		// The secrets bundle and the boot media ignore the version: only
		// every node's applied configuration changes.
		{name: "Talos version",
			edit: func(c obj) { at(c, "cluster")["talosVersion"] = "v1.9.6" },
			want: []step{{"update", "cp-1-apply"}, {"update", "cp-2-apply"}, {"update", "cp-3-apply"}, {"update", "w-1-apply"}}},
	}
}

// raw turns a config object into the raw values the engine passes a program.
func raw(t testing.TB, c obj) map[string]string {
	t.Helper()
	out, err := offlinetest.RawConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// edited returns a deep copy of the base config with one change applied.
func edited(t testing.TB, edit func(obj)) obj {
	t.Helper()
	var c obj
	b, _ := json.Marshal(baseConfig())
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(c)
	}
	return c
}

// mockSteps runs the program on the base and the changed config under the
// recording mock and derives the steps the change plans.
func mockSteps(t *testing.T, ch change) []step {
	t.Helper()
	run := func(c obj) map[string]offline.Registration {
		cfg := raw(t, c)
		// Vault's TLS material: secret keys, placeholders under mocks.
		tls := []string{"milner:vaultTlsCert", "milner:vaultTlsKey", "milner:vaultTlsCa"}
		for _, k := range tls {
			cfg[k] = config.PlaceholderSecret
		}
		rec, err := offline.Run(stacks.Program, "catalog", cfg, tls...)
		if err != nil {
			t.Fatalf("%s: %v", ch.name, err)
		}
		regs := map[string]offline.Registration{}
		for _, r := range rec.Registrations() {
			regs[r.URN] = r
		}
		return regs
	}
	before, after := run(edited(t, nil)), run(edited(t, ch.edit))
	var steps []step
	for urn, a := range after {
		b, ok := before[urn]
		switch {
		case !ok:
			steps = append(steps, step{"create", a.Name})
		case !slices.Equal(changedKeys(b, a), nil):
			op := "update"
			for _, k := range changedKeys(b, a) {
				if slices.Contains(a.Options.ReplaceOnChanges, "*") || slices.Contains(a.Options.ReplaceOnChanges, k) {
					op = "replace"
				}
			}
			steps = append(steps, step{op, a.Name})
		}
	}
	for urn, b := range before {
		if _, ok := after[urn]; !ok {
			steps = append(steps, step{"delete", b.Name})
		}
	}
	return steps
}

// changedKeys returns the top-level inputs that differ between two
// registrations of one resource, once the paths the new registration
// ignores are removed from both.
func changedKeys(before, after offline.Registration) []string {
	strip := func(m resource.PropertyMap) resource.PropertyValue {
		v := resource.NewProperty(m.Copy())
		for _, p := range after.Options.IgnoreChanges {
			if path, err := resource.ParsePropertyPath(p); err == nil {
				path.Delete(v)
			}
		}
		return v
	}
	b, a := strip(before.Inputs).ObjectValue(), strip(after.Inputs).ObjectValue()
	var keys []string
	for k := range a {
		if bv, ok := b[k]; !ok || !bv.DeepEquals(a[k]) {
			keys = append(keys, string(k))
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, string(k))
		}
	}
	slices.Sort(keys)
	return keys
}

// sameSteps reports whether got holds exactly want, in any order, and
// describes the difference.
func sameSteps(got, want []step) (bool, string) {
	norm := func(s []step) []string {
		out := make([]string, 0, len(s))
		for _, x := range s {
			out = append(out, x.String())
		}
		slices.Sort(out)
		return out
	}
	g, w := norm(got), norm(want)
	if slices.Equal(g, w) {
		return true, ""
	}
	return false, fmt.Sprintf("planned [%s], want exactly [%s]", strings.Join(g, ", "), strings.Join(w, ", "))
}

// runCatalog checks every change, substrate changes through preview when
// it is set, and prints the score. preview runs the substrate layer only, so
// it must plan exactly the substrate part of the steps (the children of the
// substrate component, named "<cluster>-...").
func runCatalog(t *testing.T, label string, preview func(t *testing.T, ch change) []step) {
	t.Helper()
	cat := catalog()
	ok := 0
	for _, ch := range cat {
		t.Run(ch.name, func(t *testing.T) {
			got, want := []step(nil), ch.want
			if ch.substrate && preview != nil {
				got = preview(t, ch)
				want = slices.DeleteFunc(slices.Clone(want), func(s step) bool { return !strings.HasPrefix(s.name, cluster+"-") })
			} else {
				got = mockSteps(t, ch)
			}
			if same, why := sameSteps(got, want); !same {
				t.Errorf("%s: %s", ch.name, why)
				return
			}
			ok++
		})
	}
	fmt.Printf("delta precision%s: %d/%d\n", label, ok, len(cat))
}

// TestCatalog runs the whole catalog under mocks.
func TestCatalog(t *testing.T) {
	runCatalog(t, " (mocks)", nil)
}
