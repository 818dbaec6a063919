package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// The sizes of Pulumi.local.yaml: the smallest validation allows.
const (
	vcpu          = 1
	cpMemoryMiB   = 2048
	workMemoryMiB = 1024
	osDiskGiB     = 10
	dataDiskGiB   = 1
	// p4MemoryMiB is the one node's memory in the P4 variant (node 2, a
	// control plane, from cpMemoryMiB).
	p4MemoryMiB = 3072
)

// node is one node, as both tools take it.
type node struct {
	Name, Role, Address, MAC string
	MemoryMiB                int
}

// side is one tool's copy of the graph: its own names, subnet and MACs, so
// both can exist on the same libvirtd at once.
type side struct {
	cluster string
	octet   int // 10.<octet>.<n>.0/24
	macByte int // 52:54:00:<macByte>:<n>:<i>
}

func (s side) nodes(n int) []node {
	out := make([]node, 0, n)
	for i := range n {
		role, mem, name := "controlplane", cpMemoryMiB, fmt.Sprintf("cp-%d", i+1)
		if i >= 3 {
			role, mem, name = "worker", workMemoryMiB, fmt.Sprintf("w-%d", i-2)
		}
		out = append(out, node{
			Name: name, Role: role, MemoryMiB: mem,
			Address: fmt.Sprintf("10.%d.%d.%d", s.octet, n, 11+i),
			MAC:     fmt.Sprintf("52:54:00:%02x:%02x:%02x", s.macByte, n, 11+i),
		})
	}
	return out
}

// The DHCP range's last host; the VIP is .240.
const dhcpEnd = 199

// dhcpStart is the DHCP range's first host: .100, or past the node
// addresses (.11 on) where N nodes reach it (N = 100), since validation
// refuses a node address inside the range.
func dhcpStart(n int) int { return max(100, 11+n+9) }

func (s side) net(n int, host int) string { return fmt.Sprintf("10.%d.%d.%d", s.octet, n, host) }

// runGen is `milnerbench gen -n N -dir DIR [-image PATH] [-running=false]`:
// it writes into DIR the stack file of Milner's side, shaped like
// Pulumi.local.yaml (stack.yaml and, with node 2's memory changed,
// stack-p4.yaml), and the Terraform variables of the same graph
// (terraform.tfvars.json, p4.tfvars.json). Three control planes, the rest
// workers.
func runGen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	n := fs.Int("n", 3, "nodes")
	dir := fs.String("dir", "", "output directory (required)")
	image := fs.String("image", "/var/lib/milner-bench/boot.qcow2", "boot image")
	pools := fs.String("pools", "/var/lib/milner-bench", "parent directory of the pools")
	running := fs.Bool("running", true, "Terraform starts the domains (Milner: the -stopped flag of the engine verbs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *n < 1 || *n > 150 {
		return fmt.Errorf("need -dir and 1 <= -n <= 150 (addresses .11 on, the DHCP range after them, the VIP .240)")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	m := side{cluster: fmt.Sprintf("bench-m%d", *n), octet: 201, macByte: 0xc9}
	t := side{cluster: fmt.Sprintf("bench-t%d", *n), octet: 202, macByte: 0xca}
	for file, p4 := range map[string]bool{"stack.yaml": false, "stack-p4.yaml": true} {
		if err := writeStack(filepath.Join(*dir, file), m, *n, *image, *pools, p4); err != nil {
			return err
		}
	}
	for file, p4 := range map[string]bool{"terraform.tfvars.json": false, "p4.tfvars.json": true} {
		if err := writeTFVars(filepath.Join(*dir, file), t, *n, *image, *pools, *running, p4); err != nil {
			return err
		}
	}
	return nil
}

// memoryMiB is node i's memory; in the P4 variant node 2 (index 1) has
// p4MemoryMiB instead, on both sides.
func memoryMiB(nd node, i int, p4 bool) int {
	if p4 && i == 1 {
		return p4MemoryMiB
	}
	return nd.MemoryMiB
}

// writeStack writes a stack file shaped like Pulumi.local.yaml.
func writeStack(path string, s side, n int, image, pools string, p4 bool) error {
	var nodes []map[string]any
	for i, nd := range s.nodes(n) {
		mem := memoryMiB(nd, i, p4)
		nodes = append(nodes, map[string]any{
			"name": nd.Name, "role": nd.Role, "vcpu": vcpu, "memoryMiB": mem,
			"osDiskGiB": osDiskGiB, "dataDiskGiB": dataDiskGiB, "address": nd.Address, "mac": nd.MAC,
		})
	}
	cfg := map[string]any{"config": map[string]any{
		"milner:cluster": map[string]any{
			"name": s.cluster, "talosVersion": "v1.9.5", "configContract": "v1.9", "kubernetesVersion": "v1.32.3", "vip": s.net(n, 240),
		},
		"milner:substrate": map[string]any{"kind": "libvirt", "libvirt": map[string]any{
			"uri": "qemu:///system", "domainType": "qemu",
			"poolPath": filepath.Join(pools, s.cluster), "bootImage": image,
		}},
		"milner:network": map[string]any{
			"mode": "isolated", "cidr": s.net(n, 0) + "/24",
			"dhcpRange": map[string]any{"start": s.net(n, dhcpStart(n)), "end": s.net(n, dhcpEnd)},
		},
		"milner:nodes":     nodes,
		"milner:stopAfter": "substrate",
	}}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// writeTFVars writes bench/terraform's variables for the same graph.
func writeTFVars(path string, s side, n int, image, pools string, running, p4 bool) error {
	var nodes []map[string]any
	for i, nd := range s.nodes(n) {
		mem := memoryMiB(nd, i, p4)
		nodes = append(nodes, map[string]any{
			"name": nd.Name, "vcpu": vcpu, "memory_mib": mem,
			"os_disk_gib": osDiskGiB, "data_disk_gib": dataDiskGiB, "address": nd.Address, "mac": nd.MAC,
		})
	}
	vars := map[string]any{"nodes": nodes}
	if !p4 {
		vars["cluster"] = s.cluster
		vars["pool_path"] = filepath.Join(pools, s.cluster)
		vars["boot_image"] = image
		vars["cidr"] = s.net(n, 0) + "/24"
		vars["dhcp_start"] = s.net(n, dhcpStart(n))
		vars["dhcp_end"] = s.net(n, dhcpEnd)
		vars["running"] = running
	}
	b, err := json.MarshalIndent(vars, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
