package guard

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/tests/offlinetest"
)

// declaredBy reads what the preview of a clean install of the stack would
// declare: the program's registrations, stopped after the substrate layer,
// as the preview's create (and import) steps.
func declaredBy(t *testing.T, cfg map[string]string) []Declared {
	t.Helper()
	cfg["milner:stopAfter"] = "substrate"
	rec, err := offline.Run(stacks.Program, "dev", cfg)
	require.NoError(t, err)
	d, err := DeclaredBy(offlinetest.Steps(rec), "milner-dev")
	require.NoError(t, err)
	return d
}

func devDeclared(t *testing.T) []Declared {
	t.Helper()
	cfg, err := offlinetest.ReadStackConfig("../../Pulumi.dev.yaml")
	require.NoError(t, err)
	return declaredBy(t, cfg)
}

func TestDeclaredLibvirtNamesComeFromTheProgram(t *testing.T) {
	d := devDeclared(t)
	require.Len(t, d, 12) // pool, network, boot, 3 x (os, data, domain)
	i := slices.IndexFunc(d, func(x Declared) bool { return x.Logical == "milner-dev-cp-2" })
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, Declared{Type: gate.TypeLibvirtDomain, Logical: "milner-dev-cp-2", Name: "milner-dev-cp-2", Node: "cp-2", Owner: "milner/dev"}, d[i])
	i = slices.IndexFunc(d, func(x Declared) bool { return x.Logical == "milner-dev-cp-1-data" })
	assert.Equal(t, "milner-dev-cp-1-data.qcow2", d[i].Name)
	assert.Equal(t, "milner-dev", d[i].Pool, "a volume is matched in its pool")
	i = slices.IndexFunc(d, func(x Declared) bool { return x.Type == gate.TypeLibvirtPool })
	assert.Equal(t, "/var/lib/libvirt/images/milner-dev", d[i].Path)
}

// state builds a State holding "type::logical" entries.
func state(entries ...string) State {
	s := State{}
	for _, e := range entries {
		typ, logical, _ := strings.Cut(e, "::")
		s[Ref{typ, logical}] = Object{ID: "id-of-" + logical}
	}
	return s
}

func TestCheck(t *testing.T) {
	declared := devDeclared(t)
	var all []string
	var live []Object
	for _, d := range declared {
		all = append(all, d.Type+"::"+d.Logical)
		live = append(live, Object{Type: d.Type, Name: d.Name, ID: "id-of-" + d.Name, Pool: d.Pool, Path: d.Path, Owner: d.Owner})
	}
	withoutCP2 := slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == gate.TypeLibvirtDomain+"::milner-dev-cp-2" })
	liveWithoutCP3 := slices.DeleteFunc(slices.Clone(live), func(o Object) bool { return o.Name == "milner-dev-cp-3" })

	for _, tc := range []struct {
		name    string
		inState State
		live    []Object
		want    []string // substrings, one per finding, in order
	}{
		{"converged", state(all...), live, nil},
		{"clean install: nothing live, nothing in state", state(), nil, nil},
		{"partly created: a domain not yet created is fine", state(all...), liveWithoutCP3, nil},
		{"unrelated live objects are ignored", state(all...), append(slices.Clone(live), Object{Type: gate.TypeLibvirtDomain, Name: "someone-else"}), nil},
		{"orphan domain", state(withoutCP2...), live, []string{
			`domain "milner-dev-cp-2" (milner-dev-cp-2) exists on the host but not in the state of stack "dev"`,
		}},
		{"empty state, live cluster", state(), live, []string{
			`the state of stack "dev" holds no substrate resource, but 12 of its objects live on the host`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check("dev", declared, tc.inState, tc.live, nil)
			if tc.want == nil {
				assert.Empty(t, got)
				return
			}
			require.NotEmpty(t, got)
			for i, w := range tc.want {
				assert.Contains(t, got[i].Problem, w)
			}
		})
	}
}

func TestOrphanDomainFixIsTheExactAdoptCommand(t *testing.T) {
	declared := devDeclared(t)
	live := []Object{{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-2", ID: "0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69"}}
	got := Check("dev", declared, state(gate.TypeLibvirtPool+"::milner-dev-pool"), live, nil)
	require.Len(t, got, 1)
	assert.Equal(t, "milner adopt --stack dev --node cp-2 --id 0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69", got[0].Fix)
}

func TestAdoptedDomainIsNotAnOrphan(t *testing.T) {
	cfg, err := offlinetest.ReadStackConfig("../../Pulumi.dev.yaml")
	require.NoError(t, err)
	cfg["milner:nodes"] = strings.Replace(cfg["milner:nodes"], `"name":"cp-2"`, `"adoptId":"0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69","name":"cp-2"`, 1)
	declared := declaredBy(t, cfg)
	inState := state(gate.TypeLibvirtPool + "::milner-dev-pool")

	adopted := []Object{{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-2", ID: "0F4A6C1E-8D2B-4A57-9A0E-2F1D3C4B5A69"}}
	assert.Empty(t, Check("dev", declared, inState, adopted, nil), "the domain adoptId names is the one the up imports")

	other := []Object{{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-2", ID: "11111111-2222-3333-4444-555555555555"}}
	assert.Len(t, Check("dev", declared, inState, other, nil), 1, "a domain of that name with another UUID is still an orphan")
}

func TestStoppedOrphanIsStartedBeforeAdoption(t *testing.T) {
	declared := devDeclared(t)
	live := []Object{{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-3", ID: "u3", Stopped: true}}
	got := Check("dev", declared, state(gate.TypeLibvirtPool+"::milner-dev-pool"), live, nil)
	require.Len(t, got, 1)
	assert.Equal(t, "virsh start milner-dev-cp-3 && milner adopt --stack dev --node cp-3 --id u3", got[0].Fix)
}

func TestEmptyStateFixNamesRestoreAndAdopt(t *testing.T) {
	declared := devDeclared(t)
	live := []Object{
		{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-1", ID: "u1"},
		{Type: gate.TypeLibvirtVolume, Name: "milner-dev-cp-1-data.qcow2", ID: "/pool/milner-dev-cp-1-data.qcow2", Pool: "milner-dev"},
	}
	got := Check("dev", declared, state(), live, nil)
	require.Len(t, got, 3)
	assert.True(t, strings.HasPrefix(got[0].Fix, "restore the stack's state from a backup"))
	assert.True(t, strings.HasSuffix(got[0].Fix, "; or adopt the live objects: milner adopt --stack dev --all"), got[0].Fix)
	assert.Equal(t, "milner adopt --stack dev --node cp-1 --id u1", got[1].Fix)
	assert.Equal(t, "milner adopt --stack dev --all", got[2].Fix, "a volume is adopted with the rest, by its logical name")

	live[0].Stopped = true
	got = Check("dev", declared, state(), live, nil)
	assert.True(t, strings.HasSuffix(got[0].Fix, ": virsh start milner-dev-cp-1 && milner adopt --stack dev --all"), got[0].Fix)
}

func TestUUIDFormat(t *testing.T) {
	u := [16]byte{0x0f, 0x4a, 0x6c, 0x1e, 0x8d, 0x2b, 0x4a, 0x57, 0x9a, 0x0e, 0x2f, 0x1d, 0x3c, 0x4b, 0x5a, 0x69}
	assert.Equal(t, "0f4a6c1e-8d2b-4a57-9a0e-2f1d3c4b5a69", uuid(u))
}

// TestAnotherStacksObjectsAreNeverOfferedForAdoption: a domain tagged for
// another stack and a pool of this name at another path are refused with a
// rename, never an adopt or import command; a volume of this name in
// another pool is not this stack's at all.
func TestAnotherStacksObjectsAreNeverOfferedForAdoption(t *testing.T) {
	declared := devDeclared(t)
	inState := state(gate.TypeLibvirtNetwork + "::milner-dev-net")
	live := []Object{
		{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-1", ID: "u1", Owner: "milner/staging"},
		{Type: gate.TypeLibvirtPool, Name: "milner-dev", ID: "p1", Path: "/srv/other"},
		{Type: gate.TypeLibvirtVolume, Name: "milner-dev-cp-1-os.qcow2", ID: "/srv/x/milner-dev-cp-1-os.qcow2", Pool: "default"},
	}
	got := Check("dev", declared, inState, live, nil)
	require.Len(t, got, 2, "%v", got)
	problems := got[0].Problem + "\n" + got[1].Problem
	assert.Contains(t, problems, `pool "milner-dev" exists on the host at /srv/other`)
	assert.Contains(t, problems, `domain "milner-dev-cp-1" belongs to milner/staging (its owner tag), not to stack "dev"`)
	for _, f := range got {
		assert.NotContains(t, f.Fix, "adopt --stack")
		assert.NotContains(t, f.Fix, "pulumi import")
		assert.Contains(t, f.Fix, "own milner:cluster.name")
	}

	own := []Object{{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-1", ID: "u1", Owner: "milner/dev"}}
	got = Check("dev", declared, inState, own, nil)
	require.Len(t, got, 1)
	assert.Equal(t, "milner adopt --stack dev --node cp-1 --id u1", got[0].Fix, "a domain tagged for this stack is offered for adoption")
	assert.NotContains(t, got[0].Problem, "no Milner owner tag")

	untagged := []Object{{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-1", ID: "u1"}}
	got = Check("dev", declared, inState, untagged, nil)
	require.Len(t, got, 1)
	assert.Contains(t, got[0].Problem, "carries no Milner owner tag")
}

// TestAdoptTakesEveryLiveObjectButNoOneElses: adopt --all records every
// live object the state lacks (domains by node, the rest by logical name,
// by the id the provider imports), nothing already in state, and never a
// shut-off domain or another stack's object.
func TestAdoptTakesEveryLiveObjectButNoOneElses(t *testing.T) {
	declared := devDeclared(t)
	live := []Object{
		{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-1", ID: "u1", Owner: "milner/dev"},
		{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-2", ID: "u2", Stopped: true},
		{Type: gate.TypeLibvirtDomain, Name: "milner-dev-cp-3", ID: "u3", Owner: "milner/staging"},
		{Type: gate.TypeLibvirtVolume, Name: "milner-dev-cp-1-data.qcow2", ID: "/pool/milner-dev-cp-1-data.qcow2", Pool: "milner-dev"},
		{Type: gate.TypeLibvirtVolume, Name: "milner-dev-cp-1-os.qcow2", ID: "/other/milner-dev-cp-1-os.qcow2", Pool: "default"},
		{Type: gate.TypeLibvirtNetwork, Name: "milner-dev", ID: "n1"},
		{Type: gate.TypeLibvirtPool, Name: "milner-dev", ID: "p1"},
	}
	a, refused := Adopt("dev", declared, state(gate.TypeLibvirtNetwork+"::milner-dev-net"), live)
	assert.Equal(t, map[string]string{"cp-1": "u1"}, a.Nodes)
	assert.Equal(t, map[string]string{"milner-dev-pool": "p1", "milner-dev-cp-1-data": "/pool/milner-dev-cp-1-data.qcow2"}, a.Objects,
		"the network is in state; a volume of that name in another pool is not this stack's")
	require.Len(t, refused, 2)
	assert.Contains(t, refused[0].Problem+refused[1].Problem, `domain "milner-dev-cp-2" is shut off`)
	assert.Contains(t, refused[0].Problem+refused[1].Problem, "belongs to milner/staging")
}

// TestStaleIdentityIsRefused: a live domain or volume of the declared name
// whose id is not the state's (a state older than the host) is a finding;
// equal ids, an absent live object and an object absent from state are not.
func TestStaleIdentityIsRefused(t *testing.T) {
	declared := []Declared{
		{Type: gate.TypeLibvirtDomain, Logical: "c-cp-1", Name: "c-cp-1", Node: "cp-1"},
		{Type: gate.TypeLibvirtDomain, Logical: "c-w-1", Name: "c-w-1", Node: "w-1"},
		{Type: gate.TypeLibvirtVolume, Logical: "c-cp-1-data", Name: "c-cp-1-data.qcow2", Pool: "c"},
		{Type: gate.TypeLibvirtDomain, Logical: "c-w-2", Name: "c-w-2", Node: "w-2"},
	}
	state := State{
		{gate.TypeLibvirtDomain, "c-cp-1"}:      {ID: "11111111-1111-1111-1111-111111111111"},
		{gate.TypeLibvirtDomain, "c-w-1"}:       {ID: "22222222-2222-2222-2222-222222222222"},
		{gate.TypeLibvirtVolume, "c-cp-1-data"}: {ID: "/p/c-cp-1-data.qcow2"},
	}
	live := []Object{
		{Type: gate.TypeLibvirtDomain, Name: "c-cp-1", ID: "99999999-9999-9999-9999-999999999999"},
		{Type: gate.TypeLibvirtDomain, Name: "c-w-1", ID: "22222222-2222-2222-2222-222222222222"},
		{Type: gate.TypeLibvirtVolume, Name: "c-cp-1-data.qcow2", Pool: "c", ID: "/p/c-cp-1-data.qcow2.new"},
		{Type: gate.TypeLibvirtDomain, Name: "c-w-2", ID: "33333333-3333-3333-3333-333333333333"},
	}
	got := Stale("dev", declared, state, live)
	if len(got) != 2 {
		t.Fatalf("want 2 findings (cp-1's domain, its data volume), got %d: %v", len(got), got)
	}
	for i, want := range []string{`"c-cp-1" (c-cp-1) as 11111111`, `"c-cp-1-data.qcow2" (c-cp-1-data) as /p/c-cp-1-data.qcow2`} {
		if !strings.Contains(got[i].Problem, want) || !strings.Contains(got[i].Fix, "--backup latest") {
			t.Errorf("finding %d: %v; want it to name %s and the restore fix", i, got[i], want)
		}
	}
}

// TestUnreadableStepIsAnError: a preview step the guard cannot read is an
// error, never a skipped guard.
func TestUnreadableStepIsAnError(t *testing.T) {
	urn := "urn:pulumi:dev::milner::" + gate.TypeLibvirtDomain + "::milner-dev-cp-1"
	_, err := DeclaredBy([]gate.Step{{Op: apitype.OpCreate, URN: urn, Type: gate.TypeLibvirtDomain, Inputs: map[string]any{"name": 3.0}}}, "milner-dev")
	assert.ErrorContains(t, err, `input "name" is float64`)
	vm := "urn:pulumi:prod::milner::" + gate.TypeProxmoxVM + "::milner-prod-cp-1"
	_, err = DeclaredBy([]gate.Step{{Op: apitype.OpCreate, URN: vm, Type: gate.TypeProxmoxVM, Inputs: map[string]any{"name": "x", "nodeName": "pve-1", "vmId": "150"}}}, "milner-prod")
	assert.ErrorContains(t, err, `input "vmId" is string`)
}

// TestDeclaredFromARealPreview reads the declared objects from the event
// streams the real engine and libvirt plugin emitted (internal/gate
// testdata, real-*.jsonl): a create from empty state and a no-op both carry
// every object's libvirt name and the pool's directory in their steps.
func TestDeclaredFromARealPreview(t *testing.T) {
	for _, capture := range []string{"real-create.jsonl", "real-noop.jsonl"} {
		f, err := os.Open(filepath.Join("..", "gate", "testdata", capture))
		require.NoError(t, err)
		evs, err := gate.ReadEvents(f)
		_ = f.Close()
		require.NoError(t, err)
		d, err := DeclaredBy(gate.StepsFromEvents(evs), "milner-gate")
		require.NoError(t, err, capture)
		require.Len(t, d, 6, capture) // pool, network, boot, os, data, domain
		i := slices.IndexFunc(d, func(x Declared) bool { return x.Type == gate.TypeLibvirtDomain })
		assert.Equal(t, Declared{Type: gate.TypeLibvirtDomain, Logical: "milner-gate-cp-1", Name: "milner-gate-cp-1", Node: "cp-1"}, d[i], capture)
		i = slices.IndexFunc(d, func(x Declared) bool { return x.Type == gate.TypeLibvirtPool })
		assert.Equal(t, "/var/lib/milner/gate/pool", d[i].Path, capture)
		i = slices.IndexFunc(d, func(x Declared) bool { return x.Logical == "milner-gate-cp-1-data" })
		assert.Equal(t, Declared{Type: gate.TypeLibvirtVolume, Logical: "milner-gate-cp-1-data", Name: "milner-gate-cp-1-data.qcow2", Pool: "milner-gate"}, d[i], capture)
	}
}

// TestRecreatedVolumeIsRefused: a volume found under the key (path) the
// state records, whose file is another one than the state records (born
// later, another handle), is refused, naming the node's disk and both
// ways out; the same file, written to, and a volume the state records no
// identity of (listed by Unrecorded, for the next up to record) are not.
func TestRecreatedVolumeIsRefused(t *testing.T) {
	const (
		path     = "/p/c-cp-1-data.qcow2"
		original = "ino=12 btime=1796393966.742669192 fh=1:0c0000005ebf13ed"
		// virsh vol-delete and vol-create-as on ext4: the inode number
		// reused, a new birth time and generation.
		again = "ino=12 btime=1796394012.578669192 fh=1:0c00000066bf13ed"
	)
	declared := []Declared{
		{Type: gate.TypeLibvirtDomain, Logical: "c-cp-1", Name: "c-cp-1", Node: "cp-1"},
		{Type: gate.TypeLibvirtVolume, Logical: "c-cp-1-data", Name: "c-cp-1-data.qcow2", Pool: "c"},
	}
	inState := func(incarnation string) State {
		return State{{gate.TypeLibvirtVolume, "c-cp-1-data"}: {ID: path, Incarnation: incarnation}}
	}
	live := func(incarnation string) []Object {
		return []Object{{Type: gate.TypeLibvirtVolume, Name: "c-cp-1-data.qcow2", Pool: "c", ID: path, Incarnation: incarnation}}
	}
	for _, tc := range []struct {
		name          string
		recorded, now string
		refused       bool
		unrecorded    []string
	}{
		{"deleted and recreated at the same path", original, again, true, nil},
		{"the same file, written to", original, original, false, nil},
		{"no identity recorded: nothing to compare, the next up records it", "", again, false, []string{"c-cp-1-data"}},
		{"the host tells none (not on this machine): not told", original, "", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Stale("dev", declared, inState(tc.recorded), live(tc.now))
			assert.Equal(t, tc.unrecorded, Unrecorded(declared, inState(tc.recorded), live(tc.now)))
			if !tc.refused {
				assert.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			f := got[0]
			assert.Equal(t, "c-cp-1-data", f.Recreated)
			for _, want := range []string{`volume "c-cp-1-data.qcow2" (c-cp-1-data, node cp-1's data disk)`, "as the file " + original, "the file at " + path + " is " + again, "(another btime)", "recreated at the same path outside milner"} {
				assert.Contains(t, f.Problem, want)
			}
			assert.Contains(t, f.Fix, "put the original file back at "+path)
			assert.Contains(t, f.Fix, "milner up --stack dev --accept-recreated c-cp-1-data")
		})
	}
}
