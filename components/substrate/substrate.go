// Package substrate owns the machines of a Milner cluster: storage, network,
// boot media and one disposable VM per node, with each node's persistent disks
// kept as separate, protected resources.
//
// Logical names created here are a state contract: renaming one without an
// alias makes the engine plan a delete and a create of a live VM or disk.
package substrate

import (
	"github.com/milner/milner/components/vocab"
	"net/netip"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Substrate is what the rest of the program needs of a machine layer: the
// facts of every node it brought up, in config order.
type Substrate interface {
	pulumi.ComponentResource
	// Nodes returns one entry per configured node, in config order.
	Nodes() []Node
}

// Node is what a substrate reports of one node it brought up.
type Node struct {
	// Name is the node's logical name from config; also its hostname.
	Name string
	// Role is the node's cluster role.
	Role vocab.Role
	// Address is the node's static IPv4 address.
	Address netip.Addr
	// InstallDisk is the device Talos installs to, as the guest sees it.
	InstallDisk string
	// DataDisk is the device of the node's persistent data disk, as the guest sees it.
	DataDisk string
	// MachineID is the provider id of the node's VM (libvirt domain UUID, Proxmox VM id).
	// Its resolution marks the VM as created, so it is the data edge from the
	// machine to the node's Talos configuration.
	MachineID pulumi.IDOutput
	// VM is the node's VM resource: what the node's configuration waits
	// for. Depend on it, not on the substrate component: the Go SDK expands
	// a dependency on a component to the children registered so far, and a
	// child joins its parent asynchronously (sdk/v3 go/pulumi context.go
	// getOpts calls addChild in the registration goroutine; rpc.go
	// expandDependencies), so such a dependency can miss the VM.
	VM pulumi.Resource
}

// NodeSpec is the configured shape of one node, shared by every substrate.
type NodeSpec struct {
	// Name is the node's logical name, used in every child resource name.
	Name string
	// Role is the node's cluster role.
	Role vocab.Role
	// VCPU is the number of virtual CPUs.
	VCPU int
	// MemoryMiB is the VM's memory in MiB.
	MemoryMiB int
	// OSDiskGiB is the size of the OS disk Talos installs to.
	OSDiskGiB int
	// DataDiskGiB is the size of the persistent data disk.
	DataDiskGiB int
	// Address is the node's static IPv4 address.
	Address netip.Addr
	// MAC is the node's NIC hardware address; stable so DHCP reservations and
	// Talos' interface selectors survive a VM replace.
	MAC string
	// VMID is the node's fixed Proxmox VM id (Proxmox only).
	VMID int
	// AdoptID, when set, is the id of an existing VM to import instead of creating one.
	AdoptID string
	// Host is the Proxmox host (PVE node) of the node's VM and disk holder (Proxmox only).
	Host string
	// HolderAdoptID, when set, is the VM id of an existing disk holder to
	// import instead of creating one (Proxmox only).
	HolderAdoptID string
}

// gib is one GiB in bytes.
const gib = 1 << 30
