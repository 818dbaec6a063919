package guard

import (
	"strings"
	"testing"

	"github.com/milner/milner/internal/gate"
)

// TestStaleProxmoxIsRefused: a live guest of the declared name with another
// VM id or on another host than the state records is a finding naming the
// stale VM; a VM whose id and host agree, one absent from state, one absent
// from the cluster, and the state's VM id carried by a guest of another
// name (an adoption stopped before its rename) are not.
func TestStaleProxmoxIsRefused(t *testing.T) {
	vm := gate.TypeProxmoxVM
	declared := []Declared{
		{Type: vm, Logical: "c-cp-1", Name: "c-cp-1", VMID: 151, Host: "pve1"},
		{Type: vm, Logical: "c-w-1", Name: "c-w-1", VMID: 160, Host: "pve2"},
		{Type: vm, Logical: "c-w-2", Name: "c-w-2", VMID: 161, Host: "pve1"},
		{Type: vm, Logical: "c-w-3", Name: "c-w-3", VMID: 162, Host: "pve1"},
		{Type: vm, Logical: "c-w-4", Name: "c-w-4", VMID: 163, Host: "pve1"},
		{Type: vm, Logical: "c-w-5", Name: "c-w-5", VMID: 164, Host: "pve1"},
	}
	state := State{
		{vm, "c-cp-1"}: {ID: "150", Host: "pve1"}, // the vmId before a change
		{vm, "c-w-1"}:  {ID: "160", Host: "pve1"}, // the host before a move
		{vm, "c-w-2"}:  {ID: "161", Host: "pve1"}, // agrees
		{vm, "c-w-3"}:  {ID: "170", Host: "pve1"}, // 170 carries another name
		{vm, "c-w-5"}:  {ID: "164", Host: "pve1"}, // gone from the cluster
	}
	live := []Object{
		{Type: vm, ID: "151", Name: "c-cp-1", Host: "pve1"},
		{Type: vm, ID: "160", Name: "c-w-1", Host: "pve2"},
		{Type: vm, ID: "161", Name: "c-w-2", Host: "pve1"},
		{Type: vm, ID: "170", Name: "other", Host: "pve1"},
		{Type: vm, ID: "163", Name: "c-w-4", Host: "pve1"},
	}
	got := Stale("prod", declared, state, live)
	want := []string{
		`Proxmox VM "c-cp-1" (c-cp-1) as VM 150 on pve1, but the cluster's "c-cp-1" is VM 151 on pve1`,
		`Proxmox VM "c-w-1" (c-w-1) as VM 160 on pve1, but the cluster's "c-w-1" is VM 160 on pve2`,
	}
	if len(got) != len(want) {
		t.Fatalf("want %d findings, got %d: %v", len(want), len(got), got)
	}
	for i, w := range want {
		if !strings.Contains(got[i].Problem, w) || !strings.Contains(got[i].Fix, "--backup latest") {
			t.Errorf("finding %d: %v; want it to name %s and the restore fix", i, got[i], w)
		}
	}
}

// TestRenamedOutsideMilnerIsRefused: the live object carrying the state's
// id under another name than the state records (virsh domrename, a guest
// renamed in PVE) is a finding that names both names; the same id under the
// state's name is not.
func TestRenamedOutsideMilnerIsRefused(t *testing.T) {
	dom, vm := gate.TypeLibvirtDomain, gate.TypeProxmoxVM
	declared := []Declared{
		{Type: dom, Logical: "c-w-1", Name: "c-w-1", Node: "w-1"},
		{Type: dom, Logical: "c-w-2", Name: "c-w-2", Node: "w-2"},
		{Type: vm, Logical: "p-w-1", Name: "p-w-1", VMID: 160, Host: "pve1"},
	}
	state := State{
		{dom, "c-w-1"}: {ID: "22222222-2222-2222-2222-222222222222", Name: "c-w-1"},
		{dom, "c-w-2"}: {ID: "33333333-3333-3333-3333-333333333333", Name: "c-w-2"},
		{vm, "p-w-1"}:  {ID: "160", Host: "pve1", Name: "p-w-1"},
	}
	live := []Object{
		{Type: dom, Name: "spare", ID: "22222222-2222-2222-2222-222222222222"},
		{Type: dom, Name: "c-w-2", ID: "33333333-3333-3333-3333-333333333333"},
		{Type: vm, Name: "renamed", ID: "160", Host: "pve1"},
	}
	got := Stale("dev", declared, state, live)
	want := []string{`as "c-w-1", but on the host it is named "spare": renamed outside milner`, `as "p-w-1", but on the cluster it is named "renamed"`}
	if len(got) != len(want) {
		t.Fatalf("want %d findings, got %d: %v", len(want), len(got), got)
	}
	for i, w := range want {
		if !strings.Contains(got[i].Problem, w) || !strings.Contains(got[i].Fix, "milner refresh --stack dev") {
			t.Errorf("finding %d: %v; want it to name %s and the refresh fix", i, got[i], w)
		}
	}
}

// TestDuplicateNamesAreRefused: two guests of one name (PVE allows it) are
// never matched to the last one listed. Stale refuses a state VM gone by
// id whose name two guests carry; Check reports a VM absent from state
// whose name two guests carry as a duplicate, not as an orphan to adopt;
// Adopt refuses it.
func TestDuplicateNamesAreRefused(t *testing.T) {
	vm := gate.TypeProxmoxVM
	declared := []Declared{
		{Type: vm, Logical: "c-cp-1", Name: "c-cp-1", VMID: 151, Host: "pve1"},
		{Type: vm, Logical: "c-w-1", Name: "c-w-1", VMID: 160, Host: "pve1"},
	}
	live := []Object{
		{Type: vm, ID: "201", Name: "c-cp-1", Host: "pve1"},
		{Type: vm, ID: "202", Name: "c-cp-1", Host: "pve2"},
		{Type: vm, ID: "301", Name: "c-w-1", Host: "pve1"},
		{Type: vm, ID: "302", Name: "c-w-1", Host: "pve1"},
	}
	inState := State{{vm, "c-cp-1"}: {ID: "151", Host: "pve1"}}
	got := Stale("prod", declared, inState, live)
	if len(got) != 1 || !strings.Contains(got[0].Problem, `2 live objects are named "c-cp-1"`) || !strings.Contains(got[0].Problem, "VM 201 on pve1, VM 202 on pve2") {
		t.Fatalf("Stale: want one duplicate finding naming VMs 201 and 202, got %v", got)
	}

	got = Check("prod", declared, inState, live, nil)
	if len(got) != 1 || !strings.Contains(got[0].Problem, `2 live objects are named "c-w-1"`) {
		t.Fatalf("Check: want one duplicate finding for c-w-1, got %v", got)
	}
	a, refused := Adopt("prod", declared, inState, live)
	if len(a.Nodes)+len(a.Objects) != 0 || len(refused) != 1 || !strings.Contains(refused[0].Problem, `named "c-w-1"`) {
		t.Fatalf("Adopt: want nothing adopted and c-w-1 refused, got %+v, %v", a, refused)
	}
}
