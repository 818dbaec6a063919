package config

import (
	"fmt"
	"github.com/milner/milner/components/vocab"
	"regexp"
)

// pveNodeName matches a Proxmox VE node name: PVE names a node after its
// host name, one DNS label (pve-manager's "pve-node" format).
var pveNodeName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// validateProxmoxPlacement checks where the nodes run and how the API is
// reached: each node's host, control planes spread over the hosts, and TLS.
func (c *Config) validateProxmoxPlacement(p *problems) {
	px := c.Substrate.Proxmox
	path := Key("substrate") + ".proxmox"
	switch {
	case px.Insecure && !px.InsecureAcknowledged:
		p.addf(path+".insecure", "skips TLS verification, so the API token (VM.*, Datastore.*, Sys.Modify) goes to whoever answers on the network; "+
			"trust the host's CA instead (docs/proxmox.md \"TLS\"), or set %s.insecureAcknowledged: true to accept it", path)
	case px.Insecure:
		p.warnf(path+".insecure", "TLS verification of %s is OFF (insecureAcknowledged): the API token goes to whoever answers on the network", px.Endpoint)
	}

	hosts := map[string]bool{}
	for i, n := range c.Nodes {
		if !pveNodeName.MatchString(n.ProxmoxNode) {
			p.addf(fmt.Sprintf("%s[%d].proxmoxNode", Key("nodes"), i), "%q is not a Proxmox VE node name", n.ProxmoxNode)
			continue
		}
		hosts[n.ProxmoxNode] = true
	}
	// One host is a homelab by choice; several hosts are there to survive
	// the loss of one, which etcd does only if no host carries two of its
	// members: a host holding two of three control planes takes quorum
	// with it.
	if len(hosts) < 2 {
		return
	}
	first := map[string]int{}
	for i, n := range c.Nodes {
		if n.Role != vocab.RoleControlPlane || !hosts[n.ProxmoxNode] {
			continue
		}
		j, shared := first[n.ProxmoxNode]
		if !shared {
			first[n.ProxmoxNode] = i
			continue
		}
		np := fmt.Sprintf("%s[%d].proxmoxNode", Key("nodes"), i)
		if px.AllowControlPlanesOnOneHost {
			p.warnf(np, "control plane on host %q with nodes[%d] (allowControlPlanesOnOneHost): losing that host loses two etcd members", n.ProxmoxNode, j)
		} else {
			p.addf(np, "control plane on host %q with nodes[%d]: losing that host would lose two etcd members; "+
				"put each control plane on its own host, or set %s.allowControlPlanesOnOneHost: true", n.ProxmoxNode, j, path)
		}
	}
}
