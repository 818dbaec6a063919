package config

// The words only the stack config spells. The words it shares with the
// components (roles, network modes, disk interfaces, logical-name suffixes,
// Pod Security levels) live in components/vocab, which both import.

// Kind names a substrate implementation in stack config (milner:substrate.kind).
type Kind string

// The substrate kinds.
const (
	KindLibvirt Kind = "libvirt"
	KindProxmox Kind = "proxmox"
)

// Kinds lists every known Kind, for validation messages.
var Kinds = []Kind{KindLibvirt, KindProxmox}

// The libvirt CPU modes a domain may use. Talos 1.7+ halts on a CPU below
// x86-64-v2 ("x86_64 microarchitecture level 2 or higher is required"), and
// without a cpu element QEMU runs qemu64 (level 1). terraform-provider-libvirt
// 0.8.3 sets only the cpu element's mode (resource_libvirt_domain.go:
// domainDef.CPU = &libvirtxml.DomainCPU{Mode: ...}), never a named model, so
// the choice is a mode:
//   - host-passthrough: the host's CPU as it is; needs KVM (libvirt 9.0
//     domcapabilities for virttype qemu: host-passthrough supported='no');
//   - maximum: QEMU's "-cpu max", every feature the accelerator offers; under
//     TCG (QEMU 7.2) that includes SSE4.2, POPCNT, SSSE3 and CMPXCHG16B, the
//     x86-64-v2 set (domcapabilities for qemu: maximum supported='yes').
//
// Modes that can land below v2 (custom without a model is qemu64;
// host-model's live XML becomes a custom model, which the provider's read
// would diff) are refused by validation.
const (
	CPUHostPassthrough = "host-passthrough"
	CPUMaximum         = "maximum"
)

// CPUModes lists the CPU modes validation accepts.
var CPUModes = []string{CPUHostPassthrough, CPUMaximum}

// DefaultCPUMode is the CPU mode for a domain type: host-passthrough under
// KVM, maximum under TCG emulation (qemu), where passthrough is impossible.
func DefaultCPUMode(domainType string) string {
	if domainType == "qemu" {
		return CPUMaximum
	}
	return CPUHostPassthrough
}

// DataMountpoint is where a node's persistent data disk is mounted (Talos'
// only writable tree is /var).
const DataMountpoint = "/var/mnt/data"
