package guard

import (
	"context"
	"fmt"
	"github.com/milner/milner/components/vocab"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/pve"
)

// declareVM reads a Proxmox VM's host, VM id and disk slots from its step.
func declareVM(d *Declared, s gate.Step, cluster string) error {
	host, err := input(s, "nodeName")
	if err != nil {
		return err
	}
	vmid, ok := s.Inputs["vmId"].(float64)
	if !ok {
		return fmt.Errorf("guard: preview step %s: input \"vmId\" is %T, not a number", s.URN, s.Inputs["vmId"])
	}
	d.Host, d.VMID, d.Holder = host, int(vmid), strings.HasSuffix(d.Logical, vocab.HolderSuffix)
	d.Node = strings.TrimSuffix(strings.TrimPrefix(d.Logical, cluster+"-"), vocab.HolderSuffix)
	disks, _ := s.Inputs["disks"].([]any)
	for i, disk := range disks {
		slot, ok := disk.(map[string]any)["interface"].(string)
		if !ok {
			return fmt.Errorf("guard: preview step %s: input disks[%d].interface is not a string", s.URN, i)
		}
		d.DiskSlots = append(d.DiskSlots, slot)
	}
	return nil
}

// ListProxmox lists every guest of the Proxmox cluster, on every host, as
// live objects of the VM type (PVE VM ids are unique across QEMU and LXC).
func ListProxmox(ctx context.Context, c *pve.Client) ([]Object, error) {
	vms, err := c.VMs(ctx)
	var out []Object
	for _, v := range vms {
		out = append(out, Object{Type: gate.TypeProxmoxVM, Name: v.Name, ID: strconv.Itoa(v.VMID), Host: v.Node, Stopped: v.Status == "stopped"})
	}
	return out, err
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

// orphanVM is the finding of a live Proxmox VM that carries the VM id or
// name of a declared VM absent from state, and its adoption command. A
// node VM that owns its disks, as the OpenTofu code made them, gets the
// reassignment commands before its adoption (configOf reads its config).
func orphanVM(stack string, d Declared, v Object, declared []Declared, live []Object, configOf func(string, int) map[string]any) (Finding, string) {
	f := Finding{Problem: fmt.Sprintf("Proxmox VM %s %q on %s matches %s (%d %q on %s) but is not in the state of stack %q: an up would fail on it or create a duplicate",
		v.ID, v.Name, v.Host, d.Logical, d.VMID, d.Name, d.Host, stack)}
	vmid, _ := strconv.Atoi(v.ID)
	switch {
	case vmid != d.VMID:
		f.Fix = fmt.Sprintf("the stack wants VM id %d for %q; give nodes[%s].vmId the live id %d (its holder is then %d), or rename or remove the live VM by hand", d.VMID, d.Name, d.Node, vmid, vmid+1000)
		return f, ""
	case v.Host != d.Host:
		f.Fix = fmt.Sprintf("the VM runs on %s: set nodes[%s].proxmoxNode to %s (moving it is the planned procedure of docs/proxmox.md \"Move a node to another host (planned, gated)\"), then run the up again", v.Host, d.Node, v.Host)
		return f, ""
	}
	var cfg map[string]any
	if configOf != nil {
		cfg = configOf(d.Host, d.VMID)
	}
	adopt := fmt.Sprintf("milner adopt --stack %s --node %s --id %d", stack, d.Node, d.VMID)
	if d.Holder {
		adopt = fmt.Sprintf("milner adopt --stack %s --node %s --holder --id %d", stack, d.Node, d.VMID)
	}
	steps := emptyCDROMs(d, cfg)
	if h := slices.IndexFunc(declared, func(h Declared) bool { return h.Holder && h.Node == d.Node }); h >= 0 && !d.Holder {
		if reassign := reassignSteps(stack, d, declared[h], cfg, live); reassign != nil {
			// The VM owns its disks (the OpenTofu shape): hand them to
			// the holder first, then adopt both.
			steps = append(steps, reassign...)
		}
	}
	f.Fix = strings.Join(append(steps, adopt), " && ")
	return f, f.Fix
}

// emptyCDROMs returns the command that empties a live VM's CD-ROM drives
// before its adoption, or nil when they are empty ("none") or the VM's
// cloud-init drive. bpg v0.95.0's import reads every drive but "none" and
// the VM's own cloud-init volume as a disk (proxmoxtf/resource/vm/disk/
// disk.go Read), so a drive holding the host's "cdrom" (bpg's own default)
// or an ISO would make the adoption plan a replace, which `milner adopt`
// refuses; the program declares the drive empty (components/substrate
// proxmoxNoCDROM). On a running VM PVE changes a CD-ROM's medium live,
// with no restart (qemu-server PVE::QemuServer vmconfig_update_disk, the
// cdrom branch: Blockdev::change_medium ejects it).
func emptyCDROMs(d Declared, cfg map[string]any) []string {
	cmd := ""
	for _, k := range diskKeys(cfg) {
		s, _ := cfg[k].(string)
		file, _, _ := strings.Cut(s, ",")
		if !strings.Contains(s, "media=cdrom") || file == "none" || strings.HasSuffix(file, fmt.Sprintf("vm-%d-cloudinit", d.VMID)) {
			continue
		}
		cmd += fmt.Sprintf(" --%s none,media=cdrom", k)
	}
	if cmd == "" {
		return nil
	}
	return []string{fmt.Sprintf("ssh root@%s qm set %d%s", d.Host, d.VMID, cmd)}
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
func reassignSteps(stack string, d, holder Declared, cfg map[string]any, live []Object) []string {
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
	if !slices.ContainsFunc(live, func(o Object) bool { return o.ID == strconv.Itoa(holder.VMID) }) {
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
