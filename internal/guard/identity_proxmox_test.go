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
