package main

import (
	"context"
	"fmt"
	"github.com/milner/milner/components/vocab"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/pve"
	"github.com/milner/milner/stacks/config"
)

// proxmoxClient returns a PVE API client with the stack's endpoint, token
// and TLS setting; nil for a stack that declares no Proxmox substrate.
func proxmoxClient(o *op) (*pve.Client, error) {
	px := o.cfg.Substrate.Proxmox
	if px == nil || !o.cfg.Declares(config.LayerSubstrate) {
		return nil, nil
	}
	token := o.file.Raw[config.Key(config.ProxmoxTokenKey)]
	return pve.New(px.Endpoint, token, px.Insecure, nil)
}

// listLive lists every object on the stack's substrate, read-only: the
// libvirt host's domains, networks, pools and volumes, or the Proxmox
// cluster's guests with configOf, which reads a live VM's config (nil
// when unreadable).
func listLive(ctx context.Context, o *op) (live []guard.Object, configOf func(string, int) map[string]any, err error) {
	if o.cfg.Substrate.Kind == config.KindLibvirt {
		live, err = guard.ListLibvirt(o.cfg.Substrate.Libvirt.URI)
		return live, nil, err
	}
	c, err := proxmoxClient(o)
	switch {
	case err != nil:
		return nil, nil, err
	case c == nil:
		return nil, nil, fmt.Errorf("stack %q declares no Proxmox substrate to list", o.st.Name())
	}
	configOf = func(host string, vmid int) map[string]any {
		cfg, err := c.VMConfig(ctx, host, vmid)
		if err != nil {
			return nil
		}
		return cfg
	}
	live, err = guard.ListProxmox(ctx, c)
	return live, configOf, err
}

// preflightProxmox reads the token's effective privileges and names every
// one the program needs but lacks, before the preview asks the API
// anything, and refuses a first config over SSH to a host known_hosts
// does not know.
func preflightProxmox(o *op) error {
	c, err := proxmoxClient(o)
	if err != nil || c == nil {
		return err
	}
	px := o.cfg.Substrate.Proxmox
	plan := pve.Plan{DiskDatastores: []string{px.OSDatastore, px.DataDatastore}, ImageDatastore: px.ImageDatastore, Bridge: px.Bridge}
	for _, n := range o.cfg.Nodes {
		plan.VMIDs = append(plan.VMIDs, n.VMID, vocab.HolderVMID(n.VMID))
	}
	perms, err := c.Permissions(o.ctx)
	if err != nil {
		return err
	}
	var missing []string
	for _, m := range pve.Missing(perms, pve.Needs(plan)) {
		missing = append(missing, fmt.Sprintf("%s on %s (%s)", m.Priv, m.Path, m.Why))
	}
	if err := refuseList(missing, "refused before touching anything: the API token lacks %d privileges",
		"grant the missing privileges to the token (docs/proxmox.md \"Token privileges\"); nothing was changed"); err != nil {
		return err
	}
	return refuseUnknownHosts(o, c)
}

// refuseUnknownHosts refuses, before anything is touched, a Proxmox stack
// whose first configs go over SSH (milner:substrate.proxmox.ssh) to a host
// that ~/.ssh/known_hosts, the file the provider reads, does not know.
func refuseUnknownHosts(o *op, c *pve.Client) error {
	if o.cfg.Substrate.Proxmox.SSH == nil {
		return nil
	}
	hosts := map[string]string{}
	for _, n := range o.cfg.Nodes {
		if _, done := hosts[n.ProxmoxNode]; done {
			continue
		}
		addr, err := c.SSHAddress(o.ctx, n.ProxmoxNode)
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
	if err != nil {
		return err
	}
	return refuseList(findings, "refused before touching anything: %d Proxmox hosts are not in known_hosts",
		"add the hosts' keys to known_hosts after checking them (see above); nothing was changed")
}

// unprotectProxmoxHolders clears PVE's protection flag of the disk holders
// in the stack's state, for a confirmed teardown. The returned reprotect
// protects again those still alive, for a teardown that failed part-way
// (it does nothing for a non-Proxmox stack).
func unprotectProxmoxHolders(o *op) (func(context.Context) error, error) {
	c, err := proxmoxClient(o)
	if err != nil || c == nil {
		return func(context.Context) error { return nil }, err
	}
	resources, err := o.resources()
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, r := range resources {
		// The bpg provider's VM id is the PVE VM id.
		if r.Type == gate.TypeProxmoxVM && strings.HasSuffix(r.Name(), vocab.HolderSuffix) {
			if id, err := strconv.Atoi(r.ID); err == nil {
				ids = append(ids, id)
			}
		}
	}
	return c.Unprotect(o.ctx, ids)
}
