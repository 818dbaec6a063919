// Package vocab holds the words that both the stack config and the
// components spell: node roles, the libvirt network modes, the Proxmox disk
// interfaces, the logical-name suffixes and disk-holder VM ids of a
// substrate (a state contract), and the Pod Security levels. It imports
// neither the Pulumi SDK nor anything of stacks/, so stacks/config validates
// these words without linking a component, and a component takes them in
// its Args without knowing the stack config (tests/imports_test.go holds
// both to that).
package vocab

import "slices"

// Project is the Pulumi project's name (Pulumi.yaml's name:). Pulumi
// namespaces every config key of the project by it (milner:<key>), and
// every URN of a stack carries it.
const Project = "milner"

// Role is a node's part in the cluster.
type Role string

// The node roles. Their values are the Talos machine types.
const (
	RoleControlPlane Role = "controlplane"
	RoleWorker       Role = "worker"
)

// Roles lists every known Role, for validation messages.
var Roles = []Role{RoleControlPlane, RoleWorker}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// NetworkMode is how a libvirt cluster network reaches the outside.
type NetworkMode string

// The libvirt network modes.
const (
	// NetworkNAT gives nodes outbound access through the host (a workstation).
	NetworkNAT NetworkMode = "nat"
	// NetworkIsolated keeps all traffic between the host and the nodes (tests).
	NetworkIsolated NetworkMode = "isolated"
)

// NetworkModes lists every known network mode, for validation messages.
var NetworkModes = []NetworkMode{NetworkNAT, NetworkIsolated}

// DiskInterface is the bus both disks of a Proxmox node VM use.
type DiskInterface string

// The disk interfaces Proxmox supports for Talos nodes.
const (
	DiskVirtio DiskInterface = "virtio"
	DiskSCSI   DiskInterface = "scsi"
	DiskSATA   DiskInterface = "sata"
)

// DiskInterfaces lists every known DiskInterface, for validation messages.
var DiskInterfaces = []DiskInterface{DiskVirtio, DiskSCSI, DiskSATA}

// Valid reports whether d is a known disk interface.
func (d DiskInterface) Valid() bool { return slices.Contains(DiskInterfaces, d) }

// Devices returns the guest device names of the first (OS) and second
// (data) disk of a node VM on the interface: virtio-blk disks are /dev/vdX,
// SCSI and SATA are /dev/sdX. Known from config alone, so a node's machine
// config can be rendered before its VM exists.
func (d DiskInterface) Devices() (first, second string) {
	if d == DiskVirtio {
		return "/dev/vda", "/dev/vdb"
	}
	return "/dev/sda", "/dev/sdb"
}

// HolderVMIDOffset is added to a node's VM id to give the VM id of its disk
// holder (node 150 keeps its disks in VM 1150). Fixed ids make adoption and
// recovery a lookup, not a search, and avoid Proxmox's next-id race when
// several VMs are created at once.
const HolderVMIDOffset = 1000

// HolderVMID returns the VM id of the disk holder of the node with VM id vmID.
func HolderVMID(vmID int) int { return vmID + HolderVMIDOffset }

// HolderSuffix ends the logical (and PVE) name of a Proxmox node's disk
// holder VM, "<cluster>-<node>-disks": a VM that is never started and only
// owns the node's disks, so they survive a replace of the node VM. A state
// contract.
const HolderSuffix = "-disks"

// Suffixes of the logical names of a libvirt substrate's objects after the
// cluster name (the node name comes between for volumes): a state contract.
const (
	PoolSuffix = "-pool"
	NetSuffix  = "-net"
	BootSuffix = "-boot"
	OSSuffix   = "-os"
	DataSuffix = "-data"
)

// NodePersistent lists the logical names a node's own persistent
// substrate may have: its libvirt OS and data volumes, its Proxmox disk
// holder (a stack has the one or the others).
func NodePersistent(cluster, node string) []string {
	base := cluster + "-" + node
	return []string{base + OSSuffix, base + DataSuffix, base + HolderSuffix}
}

// LibvirtAdoptable lists, in creation order, the logical names of the
// objects besides domains that milner:substrate.libvirt.adopt (the substrate's LibvirtArgs.Adopt)
// may name: the pool, the network, the boot media, then each node's OS and data volumes.
func LibvirtAdoptable(cluster string, nodes []string) []string {
	names := []string{cluster + PoolSuffix, cluster + NetSuffix, cluster + BootSuffix}
	for _, n := range nodes {
		names = append(names, cluster+"-"+n+OSSuffix, cluster+"-"+n+DataSuffix)
	}
	return names
}

// PodSecurityLevel is a Kubernetes Pod Security Standard a namespace
// enforces through Pod Security Admission
// (https://kubernetes.io/docs/concepts/security/pod-security-admission/).
type PodSecurityLevel string

// The levels, least restricted first.
const (
	Privileged PodSecurityLevel = "privileged"
	Baseline   PodSecurityLevel = "baseline"
	Restricted PodSecurityLevel = "restricted"
)

// PodSecurityLevels lists every level.
var PodSecurityLevels = []PodSecurityLevel{Privileged, Baseline, Restricted}

// Valid reports whether l is a known level.
func (l PodSecurityLevel) Valid() bool { return slices.Contains(PodSecurityLevels, l) }
