variable "uri" {
  description = "libvirt connection URI"
  type        = string
  default     = "qemu:///system"
}

variable "cluster" {
  description = "Cluster name; every libvirt object is named after it."
  type        = string
}

variable "domain_type" {
  description = "kvm, or qemu where there is no KVM."
  type        = string
  default     = "qemu"
}

variable "pool_path" {
  description = "Host directory of the storage pool."
  type        = string
}

variable "boot_image" {
  description = "Path of the disk image that seeds new OS disks."
  type        = string
}

variable "cidr" {
  description = "Node network (isolated); libvirt takes its first host address."
  type        = string
}

variable "dhcp_start" {
  description = "First address handed to MACs without a reservation."
  type        = string
}

variable "dhcp_end" {
  description = "Last address handed to MACs without a reservation."
  type        = string
}

variable "nodes" {
  description = "The nodes, as Milner's milner:nodes."
  type = list(object({
    name          = string
    vcpu          = number
    memory_mib    = number
    os_disk_gib   = number
    data_disk_gib = number
    address       = string
    mac           = string
  }))
}

variable "running" {
  description = "Start the domains (Milner always does; the bench defines them stopped at large N on both sides)."
  type        = bool
  default     = true
}
