package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/pve"
	"github.com/milner/milner/stacks/config"
)

// refuseUnknownHosts refuses, before anything is touched, a Proxmox stack
// whose first configs go over SSH (milner:substrate.proxmox.ssh) to a host
// that ~/.ssh/known_hosts, the file the provider reads, does not know.
func refuseUnknownHosts(ctx context.Context, c *pve.Client, cfg *config.Config) error {
	if cfg.Substrate.Proxmox.SSH == nil {
		return nil
	}
	hosts := map[string]string{}
	for _, n := range cfg.Nodes {
		if _, done := hosts[n.ProxmoxNode]; done {
			continue
		}
		addr, err := c.SSHAddress(ctx, n.ProxmoxNode)
		if err != nil {
			return err
		}
		hosts[n.ProxmoxNode] = addr
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return err
	}
	findings, err := guard.KnownHosts(filepath.Join(home, ".ssh", "known_hosts"), hosts)
	if err != nil || len(findings) == 0 {
		return err
	}
	fmt.Fprintf(os.Stderr, "milner: refused before touching anything: %d Proxmox hosts are not in known_hosts:\n", len(findings))
	for _, f := range findings {
		fmt.Fprintf(os.Stderr, "  - %s\n", f)
	}
	return refused("add the hosts' keys to known_hosts after checking them (see above); nothing was changed")
}
