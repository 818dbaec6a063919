package guard

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/pve"
	"github.com/milner/milner/stacks/config"
)

// DeclaredVM is one Proxmox VM the stack declares.
type DeclaredVM struct {
	// Logical is the resource's logical name (a state contract).
	Logical string
	// Name is the PVE name of the VM.
	Name string
	// VMID is its fixed PVE VM id.
	VMID int
	// Host is the PVE node it runs on.
	Host string
	// Node is the cluster node it belongs to (cp-1).
	Node string
	// Holder is set for a disk holder VM.
	Holder bool
	// ImportID is the id the preview's import step read the VM under (the
	// bpg provider's id is the VM id; adoptId, holderAdoptId): the live VM
	// is being adopted, not orphaned.
	ImportID string
	// DiskSlots are the config keys a node VM attaches its disks on (virtio0, virtio1).
	DiskSlots []string
}

// DeclaredProxmox returns the Proxmox VMs the preview's steps declare,
// node VMs ("<cluster>-<node>") and disk holders ("<cluster>-<node>-disks").
// Names and ids come from the program as the engine ran it.
func DeclaredProxmox(steps []gate.Step, cluster string) ([]DeclaredVM, error) {
	var out []DeclaredVM
	for _, s := range goals(steps, gate.TypeProxmoxVM) {
		name, err := input(s, "name")
		if err != nil {
			return nil, err
		}
		host, err := input(s, "nodeName")
		if err != nil {
			return nil, err
		}
		vmid, ok := s.Inputs["vmId"].(float64)
		if !ok {
			return nil, fmt.Errorf("guard: preview step %s: input \"vmId\" is %T, not a number", s.URN, s.Inputs["vmId"])
		}
		d := DeclaredVM{Logical: s.Name(), Name: name, VMID: int(vmid), Host: host,
			Holder: strings.HasSuffix(s.Name(), config.HolderSuffix), ImportID: importID(s)}
		d.Node = strings.TrimSuffix(strings.TrimPrefix(d.Logical, cluster+"-"), config.HolderSuffix)
		disks, _ := s.Inputs["disks"].([]any)
		for i, disk := range disks {
			slot, ok := disk.(map[string]any)["interface"].(string)
			if !ok {
				return nil, fmt.Errorf("guard: preview step %s: input disks[%d].interface is not a string", s.URN, i)
			}
			d.DiskSlots = append(d.DiskSlots, slot)
		}
		out = append(out, d)
	}
	return out, nil
}

// ownedDisk matches a PVE volume a VM owns: "<storage>:vm-<vmid>-disk-<n>"
// (or base-/subvol-, with an optional extension), as PVE names them.
var ownedDisk = regexp.MustCompile(`^[^:,]+:(?:\d+/)?(?:vm|base)-(\d+)-disk-\d+`)

// diskKey matches the PVE config key of a disk slot.
var diskKey = regexp.MustCompile(`^(virtio|scsi|sata|ide)\d+$`)

// diskKeys are the PVE config keys of disks, in a stable order.
func diskKeys(cfg map[string]any) []string {
	return slices.DeleteFunc(slices.Sorted(maps.Keys(cfg)), func(k string) bool { return !diskKey.MatchString(k) })
}

// CheckProxmox compares the VMs the stack declares with its state (inState
// reports a logical name of a Proxmox VM in state) and the cluster's live
// guests, matched by VM id and by name. configOf returns a live VM's config
// (nil when unreadable): a node VM that owns its disks, as the OpenTofu
// code made them, gets the reassignment commands before its adoption.
func CheckProxmox(stack string, declared []DeclaredVM, inState func(logical string) bool, live []pve.VM,
	configOf func(host string, vmid int) map[string]any,
) []Finding {
	byID, byName := map[int]pve.VM{}, map[string]pve.VM{}
	for _, v := range live {
		byID[v.VMID] = v
		byName[v.Name] = v
	}
	holders := map[string]DeclaredVM{}
	for _, d := range declared {
		if d.Holder {
			holders[d.Node] = d
		}
	}
	stateHasSubstrate := false
	var orphans []Finding
	var adopt []string
	for _, d := range declared {
		if inState(d.Logical) {
			stateHasSubstrate = true
			continue
		}
		v, ok := byID[d.VMID]
		if !ok {
			if v, ok = byName[d.Name]; !ok {
				continue
			}
		}
		if d.ImportID != "" && (d.ImportID == strconv.Itoa(v.VMID) || d.ImportID == fmt.Sprintf("%s/%d", v.Node, v.VMID)) {
			continue
		}
		f := Finding{Problem: fmt.Sprintf("Proxmox VM %d %q on %s matches %s (%d %q on %s) but is not in the state of stack %q: an up would fail on it or create a duplicate",
			v.VMID, v.Name, v.Node, d.Logical, d.VMID, d.Name, d.Host, stack)}
		switch {
		case v.VMID != d.VMID:
			f.Fix = fmt.Sprintf("the stack wants VM id %d for %q; give nodes[%s].vmId the live id %d (its holder is then %d), or rename or remove the live VM by hand", d.VMID, d.Name, d.Node, v.VMID, v.VMID+1000)
		case v.Node != d.Host:
			f.Fix = fmt.Sprintf("the VM runs on %s: set nodes[%s].proxmoxNode to %s (moving it is the planned procedure of docs/proxmox.md \"Move a node to another host\"), then run the up again", v.Node, d.Node, v.Node)
		case d.Holder:
			cmd := fmt.Sprintf("milner adopt --stack %s --node %s --holder --id %d", stack, d.Node, d.VMID)
			adopt = append(adopt, cmd)
			f.Fix = cmd
		default:
			cmd := fmt.Sprintf("milner adopt --stack %s --node %s --id %d", stack, d.Node, d.VMID)
			if steps := reassignSteps(stack, d, holders[d.Node], configOf, byID); steps != nil {
				// The VM owns its disks (the OpenTofu shape): hand them to
				// the holder first, then adopt both.
				cmd = strings.Join(append(steps, cmd), " && ")
			}
			adopt = append(adopt, cmd)
			f.Fix = cmd
		}
		orphans = append(orphans, f)
	}
	return withEmptyState(stack, stateHasSubstrate, orphans, adopt, "VMs live on the Proxmox cluster", "VMs")
}

// reassignSteps returns the commands that turn a live node VM owning its
// disks into a node VM attaching them from its holder, without copying
// data, or nil when it owns none. `qm disk move <vmid> <disk> --target-vmid
// <holder> --target-disk <key>` renames the volume to the holder (qemu-server
// PVE/API2/Qemu.pm move_vm_disk: both VMs on the same node, the source VM
// stopped, the target key free, a storage with the "rename" feature, no
// snapshot using it). The holder's slots are scsi0 (OS) and scsi1 (data),
// as the program creates them; the node VM then attaches the renamed
// volumes on the stack's bus, as the program does.
func reassignSteps(stack string, d, holder DeclaredVM, configOf func(string, int) map[string]any, byID map[int]pve.VM) []string {
	cfg := configOf(d.Host, d.VMID)
	if cfg == nil || holder.VMID == 0 {
		return nil
	}
	type disk struct{ key, store string }
	var owned []disk
	for _, k := range diskKeys(cfg) {
		s, _ := cfg[k].(string)
		if m := ownedDisk.FindStringSubmatch(s); m != nil && m[1] == fmt.Sprint(d.VMID) && !strings.Contains(s, "media=cdrom") {
			owned = append(owned, disk{k, s[:strings.Index(s, ":")]})
		}
	}
	if len(owned) == 0 || len(owned) > 2 || len(d.DiskSlots) != 2 {
		// More than an OS and a data disk is not Milner's shape: no recipe.
		return nil
	}
	ssh := "ssh root@" + d.Host + " "
	var steps []string
	if _, exists := byID[holder.VMID]; !exists {
		steps = append(steps, fmt.Sprintf("%sqm create %d --name %s --onboot 0 --protection 1", ssh, holder.VMID, holder.Name))
	}
	steps = append(steps, fmt.Sprintf("%sqm shutdown %d", ssh, d.VMID))
	attach := fmt.Sprintf("%sqm set %d", ssh, d.VMID)
	for i, o := range owned {
		steps = append(steps, fmt.Sprintf("%sqm disk move %d %s --target-vmid %d --target-disk scsi%d", ssh, d.VMID, o.key, holder.VMID, i))
		// A fresh holder's volumes are numbered from 0 (PVE's
		// find_free_diskname); `qm config <holder>` shows them.
		attach += fmt.Sprintf(" --%s %s:vm-%d-disk-%d", d.DiskSlots[i], o.store, holder.VMID, i)
	}
	steps = append(steps, attach+" --boot order="+d.DiskSlots[0],
		fmt.Sprintf("milner adopt --stack %s --node %s --holder --id %d", stack, d.Node, holder.VMID))
	return steps
}
