package pve

import (
	"fmt"
	"path"
	"slices"
)

// Need is one privilege the Milner program needs on one ACL path, and why.
type Need struct {
	// Path is the ACL path, e.g. /vms/150 or /storage/local-lvm.
	Path string
	// Priv is the privilege, e.g. Datastore.AllocateSpace.
	Priv string
	// Why says which operation needs it.
	Why string
}

// Plan is what the privilege needs are derived from: the stack's Proxmox
// objects.
type Plan struct {
	// VMIDs are every VM id the stack creates (node VMs and holders).
	VMIDs []int
	// DiskDatastores hold the holders' disks and the cloud-init drives.
	DiskDatastores []string
	// ImageDatastore holds the downloaded Talos images.
	ImageDatastore string
	// Bridge is the bridge the node NICs attach to.
	Bridge string
	// SnippetsDatastore holds the nodes' first-config snippets ("": none).
	SnippetsDatastore string
}

// Needs lists the privileges the program needs, in a stable order. Each is
// grounded in the PVE API's own permission checks:
//   - creating and configuring a VM: VM.Allocate and the VM.Config.* of the
//     options it sets, VM.PowerMgmt to start/stop it, VM.Audit to read it
//     (qemu-server PVE/API2/Qemu.pm, create_vm and check_vm_modify_config_perm);
//   - attaching a volume another VM id owns (a node VM attaches its holder's
//     disks): Datastore.Audit on the storage and VM.Config.Disk on the
//     owner, /vms/<holder> (pve-storage PVE::Storage::check_volume_access,
//     the images branch since commit 42352a4, 2022-03-30, PVE 7.2; its
//     other way in, Datastore.Allocate, makes the token a datastore
//     administrator and is not needed); allocating disks:
//     Datastore.AllocateSpace;
//   - downloading an image (download-url): Datastore.AllocateTemplate on the
//     storage and Sys.Audit + Sys.Modify on / (pve-storage
//     PVE/API2/Storage/Status.pm, download_url);
//   - importing it into a disk (import-from): Datastore.Audit or
//     Datastore.AllocateSpace on the image's storage (qemu-server
//     PVE/API2/Qemu.pm $check_storage_access -> check_volume_access, the
//     'import' content branch), Audit also lists it (Content.pm index);
//   - attaching a NIC to a bridge: SDN.Use on /sdn/zones/localnetwork/<bridge>
//     (PVE 8: check_bridge_access -> check_vnet_access);
//   - uploading a snippet: bpg reads the datastore's configuration for its
//     path before it writes the file over SSH (proxmoxtf/resource/file.go
//     fileCreate -> storage GetDatastore, GET /storage/{storage}), which
//     PVE allows with Datastore.Allocate on it only (pve-storage
//     PVE/API2/Storage/Config.pm, read); then it lists the datastore's
//     snippets (fileRead, Content.pm index: Datastore.Audit).
func Needs(p Plan) []Need {
	var out []Need
	vmPrivs := []string{"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Cloudinit",
		"VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.PowerMgmt"}
	for _, id := range p.VMIDs {
		for _, priv := range vmPrivs {
			out = append(out, Need{Path: fmt.Sprintf("/vms/%d", id), Priv: priv, Why: "create and configure VM " + fmt.Sprint(id)})
		}
	}
	stores := slices.Clone(p.DiskDatastores)
	slices.Sort(stores)
	for _, ds := range slices.Compact(stores) {
		out = append(out,
			Need{Path: "/storage/" + ds, Priv: "Datastore.AllocateSpace", Why: "allocate disks"},
			Need{Path: "/storage/" + ds, Priv: "Datastore.Audit", Why: "read the datastore; attach the holder's disks to the node VM (check_volume_access)"},
		)
	}
	out = append(out,
		Need{Path: "/storage/" + p.ImageDatastore, Priv: "Datastore.AllocateTemplate", Why: "download the Talos image (download-url)"},
		Need{Path: "/storage/" + p.ImageDatastore, Priv: "Datastore.Audit", Why: "import the image into a holder's OS disk (check_volume_access of import-from) and list it"},
		Need{Path: "/", Priv: "Sys.Audit", Why: "download-url"},
		Need{Path: "/", Priv: "Sys.Modify", Why: "download-url"},
		Need{Path: "/sdn/zones/localnetwork/" + p.Bridge, Priv: "SDN.Use", Why: "attach NICs to bridge " + p.Bridge},
	)
	if ds := p.SnippetsDatastore; ds != "" {
		out = append(out,
			Need{Path: "/storage/" + ds, Priv: "Datastore.Allocate", Why: "read the snippets datastore's path (GET /storage/" + ds + ") before the snippet upload over SSH"},
			Need{Path: "/storage/" + ds, Priv: "Datastore.Audit", Why: "list the uploaded snippets"},
		)
	}
	return out
}

// Missing returns the needs that perms (GET /access/permissions) does not
// grant. A path without an entry of its own takes the privileges of its
// nearest listed ancestor, as PVE propagates ACLs down the tree; an ACL set
// without propagation on an ancestor is not visible in the reply, so this
// can pass a need that the API would refuse, never the reverse for paths
// that are listed.
func Missing(perms map[string]map[string]int, needs []Need) []Need {
	var out []Need
	for _, n := range needs {
		if effective(perms, n.Path)[n.Priv] == 0 {
			out = append(out, n)
		}
	}
	return out
}

// effective returns the privileges of the nearest listed ancestor of path
// (path itself included).
func effective(perms map[string]map[string]int, p string) map[string]int {
	for ; ; p = path.Dir(p) {
		if privs, ok := perms[p]; ok || p == "/" || p == "." {
			return privs
		}
	}
}
