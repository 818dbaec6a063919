# The Terraform equivalent of Milner's libvirt substrate
# (components/substrate/libvirt.go): one pool, one network, the boot media,
# and per node an OS volume backed by the boot media, a data volume and a
# domain. Same names pattern, sizes and provider (terraform-provider-libvirt
# 0.8.3, wired in by bench/run.sh through dev_overrides). Nodes come from
# terraform.tfvars.json, which `milnerbench gen` writes from the same node
# list as Milner's stack file.

terraform {
  required_providers {
    libvirt = { source = "dmacvicar/libvirt" }
  }
}

provider "libvirt" {
  uri = var.uri
}

locals {
  nodes = { for n in var.nodes : n.name => n }
  gib   = 1024 * 1024 * 1024
}

resource "libvirt_pool" "pool" {
  name = var.cluster
  type = "dir"
  target {
    path = var.pool_path
  }
}

# Milner's isolated mode is the provider's mode "none": no forward, nothing
# leaves the machine.
resource "libvirt_network" "net" {
  name      = var.cluster
  mode      = "none"
  addresses = [var.cidr]
  autostart = true
  dhcp {
    enabled = true
  }
  dns {
    enabled    = true
    local_only = true
  }
  xml {
    xslt = templatefile("${path.module}/dhcp-range.xsl", { start = var.dhcp_start, end = var.dhcp_end })
  }
}

resource "libvirt_volume" "boot" {
  name   = "${var.cluster}-boot.qcow2"
  pool   = libvirt_pool.pool.name
  source = var.boot_image
  format = "qcow2"
  lifecycle {
    ignore_changes = [source]
  }
}

resource "libvirt_volume" "os" {
  for_each       = local.nodes
  name           = "${var.cluster}-${each.key}-os.qcow2"
  pool           = libvirt_pool.pool.name
  base_volume_id = libvirt_volume.boot.id
  size           = each.value.os_disk_gib * local.gib
  format         = "qcow2"
}

resource "libvirt_volume" "data" {
  for_each = local.nodes
  name     = "${var.cluster}-${each.key}-data.qcow2"
  pool     = libvirt_pool.pool.name
  size     = each.value.data_disk_gib * local.gib
  format   = "qcow2"
}

# Terraform destroys before it creates by default: Milner's
# DeleteBeforeReplace. memory and vcpu are ForceNew in the provider, so a
# change is a replace, as with Milner's ReplaceOnChanges "*".
resource "libvirt_domain" "node" {
  for_each  = local.nodes
  name      = "${var.cluster}-${each.key}"
  type      = var.domain_type
  vcpu      = each.value.vcpu
  memory    = each.value.memory_mib
  running   = var.running
  autostart = true

  disk {
    volume_id = libvirt_volume.os[each.key].id
  }
  disk {
    volume_id = libvirt_volume.data[each.key].id
  }
  network_interface {
    network_id = libvirt_network.net.id
    mac        = upper(each.value.mac)
    hostname   = each.key
    addresses  = [each.value.address]
  }
  boot_device {
    dev = ["hd"]
  }
  console {
    type        = "pty"
    target_port = "0"
    target_type = "serial"
  }
  # Milner's LibvirtDomainNeverReadBack: 0.8.x never reads these back.
  lifecycle {
    ignore_changes = [network_interface[0].addresses, network_interface[0].hostname]
  }
}
