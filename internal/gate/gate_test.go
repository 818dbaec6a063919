package gate

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// load reads a recorded preview event stream and folds it into a report.
// The real-*.jsonl captures come from a one-node stack of cluster
// milner-gate; the others are of the dev stack (see testdata/README.md).
func load(t *testing.T, file string) Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := ReadEvents(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	cluster := "milner-dev"
	if strings.HasPrefix(file, "real-") {
		cluster = "milner-gate"
	}
	return NewReport(StepsFromEvents(evs), cluster)
}

func refused(rs []Refusal) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Resource)
	}
	return out
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		replace []string
		// refused are the resources (or nodes) refused, in rule order.
		refused []string
		// reason is a fragment of the first refusal's reason.
		reason string
	}{
		{name: "no-op", file: "noop.jsonl"},
		{name: "no-op (captured)", file: "real-noop.jsonl"},
		{name: "first up (captured)", file: "real-create.jsonl"},
		{name: "named domain replace (captured)", file: "real-domain-replace.jsonl", replace: []string{"cp-1"}},
		{name: "domain replace not named (captured)", file: "real-domain-replace.jsonl",
			refused: []string{"milner-gate-cp-1"}, reason: "forced by memory) but --replace does not name it"},
		{name: "data volume replace (captured)", file: "real-volume-replace.jsonl", replace: []string{"cp-1"},
			refused: []string{"milner-gate-cp-1-data"}, reason: "persistent substrate and would be replaced (forced by size)"},
		{name: "first up creates everything", file: "create.jsonl"},
		{name: "talos-only update", file: "talos-update.jsonl"},
		{name: "helm value update", file: "helm-update.jsonl"},
		{name: "named domain replace", file: "domain-replace.jsonl", replace: []string{"cp-2"}},
		{name: "delete of a release retained on delete", file: "retained-release-delete.jsonl"},

		{name: "persistent volume replace", file: "volume-replace.jsonl",
			refused: []string{"milner-dev-cp-1-data"}, reason: "persistent substrate and would be replaced (forced by size)"},
		{name: "persistent network delete", file: "network-delete.jsonl",
			refused: []string{"milner-dev-net"}, reason: "persistent substrate and would be deleted"},
		{name: "replace of a non-VM", file: "release-replace.jsonl",
			refused: []string{"vault-release"}, reason: "only node VMs are ever replaced"},
		{name: "helm release delete", file: "release-delete.jsonl",
			refused: []string{"woodpecker-release"}, reason: "Helm release would be deleted"},
		{name: "cluster secrets delete", file: "secrets-delete.jsonl",
			refused: []string{"milner-dev-secrets"}, reason: "cluster secrets would be deleted"},
		{name: "domain replace not named", file: "domain-replace.jsonl",
			refused: []string{"milner-dev-cp-2"}, reason: "--replace does not name it"},
		{name: "domain replace named differently", file: "domain-replace.jsonl", replace: []string{"cp-3"},
			refused: []string{"milner-dev-cp-2", "cp-3"}, reason: "--replace does not name it"},
		{name: "named node not replaced", file: "noop.jsonl", replace: []string{"cp-3"},
			refused: []string{"cp-3"}, reason: "does not replace its VM"},
		{name: "more nodes named than replaced", file: "domain-replace.jsonl", replace: []string{"cp-2", "cp-3"},
			refused: []string{"cp-3"}, reason: "does not replace its VM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Check(load(t, tt.file), tt.replace, nil)
			if !slices.Equal(refused(got), tt.refused) {
				t.Fatalf("refused %q, want %q; refusals: %v", refused(got), tt.refused, got)
			}
			if len(got) > 0 && !strings.Contains(got[0].Reason, tt.reason) {
				t.Errorf("reason %q does not say %q", got[0].Reason, tt.reason)
			}
			for _, r := range got {
				if r.Instead == "" {
					t.Errorf("refusal of %s says nothing about what to do instead", r.Resource)
				}
			}
		})
	}
}

func TestRefusalsSayWhatToDo(t *testing.T) {
	tests := []struct {
		file    string
		replace []string
		instead string
	}{
		{"domain-replace.jsonl", nil, "milner up --stack dev --replace cp-2"},
		{"volume-replace.jsonl", nil, "milner teardown --stack dev"},
		{"secrets-delete.jsonl", nil, "milner teardown --stack dev"},
		{"release-delete.jsonl", nil, "retainOnDelete"},
	}
	for _, tt := range tests {
		got := Check(load(t, tt.file), tt.replace, nil)
		if len(got) == 0 || !strings.Contains(got[0].Instead, tt.instead) {
			t.Errorf("%s: refusals %v, want the first to say %q", tt.file, got, tt.instead)
		}
	}
}

func TestReport(t *testing.T) {
	tests := []struct {
		file string
		// want maps a layer to "creates/updates/replaces/deletes" logical names.
		want    map[Layer][4][]string
		reboots []string
	}{
		{file: "noop.jsonl", want: map[Layer][4][]string{}},
		{file: "real-noop.jsonl", want: map[Layer][4][]string{}},
		{file: "real-create.jsonl", want: map[Layer][4][]string{
			Persistent: {{"milner-gate-pool", "milner-gate-net", "milner-gate-boot", "milner-gate-cp-1-data", "milner-gate-cp-1-os"}, nil, nil, nil},
			Disposable: {{"milner-gate-cp-1"}, nil, nil, nil},
			Other:      {{"milner-gatecap", "milner-gate", "milner-gate-libvirt"}, nil, nil, nil},
		}},
		{file: "real-volume-replace.jsonl", want: map[Layer][4][]string{
			Persistent: {nil, nil, {"milner-gate-cp-1-data"}, nil},
			Disposable: {nil, nil, {"milner-gate-cp-1"}, nil},
		}},
		{file: "talos-update.jsonl",
			want:    map[Layer][4][]string{Talos: {nil, {"cp-1-apply", "cp-2-apply", "cp-3-apply"}, nil, nil}},
			reboots: []string{"cp-1", "cp-2", "cp-3"}},
		{file: "helm-update.jsonl",
			want: map[Layer][4][]string{Apps: {nil, {"vault-release"}, nil, nil}}},
		{file: "domain-replace.jsonl",
			want: map[Layer][4][]string{
				Disposable: {nil, nil, {"milner-dev-cp-2"}, nil},
				Talos:      {nil, {"cp-2-apply"}, nil, nil},
			},
			reboots: []string{"cp-2"}},
		{file: "release-delete.jsonl",
			want: map[Layer][4][]string{
				Apps:  {nil, nil, nil, {"woodpecker-release"}},
				Other: {nil, nil, nil, {"woodpecker"}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r := load(t, tt.file)
			if want := map[bool]string{true: "gatecap", false: "dev"}[strings.HasPrefix(tt.file, "real-")]; r.Stack != want {
				t.Errorf("stack %q, want %s", r.Stack, want)
			}
			for _, l := range Layers {
				d := r.Delta(l)
				got := [4][]string{names(d.Of(Create)), names(d.Of(Update)), names(d.Of(Replace)), names(d.Of(Delete))}
				if !equal4(got, tt.want[l]) {
					t.Errorf("%s: creates/updates/replaces/deletes %q, want %q", l, got, tt.want[l])
				}
			}
			if !slices.Equal(r.Reboots, tt.reboots) {
				t.Errorf("reboots %q, want %q", r.Reboots, tt.reboots)
			}
		})
	}
}

func TestReportReplaceKeysAndNode(t *testing.T) {
	r := load(t, "domain-replace.jsonl")
	rs := r.Delta(Disposable).Of(Replace)
	if len(rs) != 1 || rs[0].Node != "cp-2" || !slices.Equal(rs[0].Keys, []string{"memory"}) {
		t.Fatalf("replaces %+v, want milner-dev-cp-2 (node cp-2) forced by memory", rs)
	}
	text := r.String()
	for _, want := range []string{"disposable substrate:", "replace milner-dev-cp-2 (libvirt:index/domain:Domain) forced by memory", "may stage a reboot): cp-2"} {
		if !strings.Contains(text, want) {
			t.Errorf("report does not say %q:\n%s", want, text)
		}
	}
}

func TestLayerOf(t *testing.T) {
	tests := []struct {
		typ, name string
		want      Layer
	}{
		{"libvirt:index/pool:Pool", "milner-dev-pool", Persistent},
		{"libvirt:index/network:Network", "milner-dev-net", Persistent},
		{"libvirt:index/volume:Volume", "milner-dev-cp-1-data", Persistent},
		{"proxmoxve:Download/file:File", "milner-prod-talos-image", Persistent},
		{TypeProxmoxVM, "milner-prod-cp-1-disks", Persistent},
		{TypeLibvirtDomain, "milner-dev-cp-1", Disposable},
		{TypeProxmoxVM, "milner-prod-cp-1", Disposable},
		{"pulumi:providers:libvirt", "milner-dev-libvirt", Other},
		{"pulumi:providers:kubernetes", "milner-dev-k8s", Other},
		{TypeConfigApply, "cp-1-apply", Talos},
		{TypeTalosSecrets, "milner-dev-secrets", Talos},
		{TypeHelmRelease, "vault-release", Apps},
		{"kubernetes:core/v1:Namespace", "vault", Apps},
		{"milner:components:TalosNode", "cp-1", Other},
	}
	for _, tt := range tests {
		if got := LayerOf(tt.typ, tt.name); got != tt.want {
			t.Errorf("LayerOf(%s, %s) = %s, want %s", tt.typ, tt.name, got, tt.want)
		}
	}
}

func names(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func equal4(a, b [4][]string) bool {
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
