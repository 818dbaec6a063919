package main

import (
	"context"
	"fmt"
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

// guardProxmox refuses an up, before anything is touched, when live VMs
// carry the VM ids or names of VMs the preview creates but are absent from
// the stack's state (empty state, orphans). It prints the exact adopt
// commands.
func guardProxmox(o *op, c *pve.Client, steps []gate.Step) error {
	declared, err := guard.DeclaredProxmox(steps, o.cfg.Cluster.Name)
	if err != nil {
		return err
	}
	resources, err := o.resources()
	if err != nil {
		return err
	}
	vms := map[string]guard.StateVM{}
	for _, r := range resources {
		if r.Type == gate.TypeProxmoxVM {
			host, _ := r.Inputs["nodeName"].(string)
			vms[r.Name()] = guard.StateVM{ID: r.ID, Host: host}
		}
	}
	live, err := c.VMs(o.ctx)
	if err != nil {
		return err
	}
	configOf := func(host string, vmid int) map[string]any {
		cfg, err := c.VMConfig(o.ctx, host, vmid)
		if err != nil {
			return nil
		}
		return cfg
	}
	inState := func(l string) bool { _, ok := vms[l]; return ok }
	stateVM := func(l string) (guard.StateVM, bool) { v, ok := vms[l]; return v, ok }
	return refuseGuard("live Proxmox VMs", guard.CheckProxmox(o.st.Name(), declared, inState, live, configOf),
		guard.StaleProxmox(o.st.Name(), declared, stateVM, live))
}

// preflightProxmox reads the token's effective privileges and names every
// one the program needs but lacks, before the preview asks the API
// anything, and refuses a first config over SSH to a host known_hosts
// does not know. It returns the stack's PVE client (nil for another
// substrate).
func preflightProxmox(o *op) (*pve.Client, error) {
	c, err := proxmoxClient(o)
	if err != nil || c == nil {
		return nil, err
	}
	px := o.cfg.Substrate.Proxmox
	plan := pve.Plan{DiskDatastores: []string{px.OSDatastore, px.DataDatastore}, ImageDatastore: px.ImageDatastore, Bridge: px.Bridge}
	for _, n := range o.cfg.Nodes {
		plan.VMIDs = append(plan.VMIDs, n.VMID, config.HolderVMID(n.VMID))
	}
	perms, err := c.Permissions(o.ctx)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, m := range pve.Missing(perms, pve.Needs(plan)) {
		missing = append(missing, fmt.Sprintf("%s on %s (%s)", m.Priv, m.Path, m.Why))
	}
	if err := refuseList(missing, "refused before touching anything: the API token lacks %d privileges",
		"grant the missing privileges to the token (docs/proxmox.md \"Token privileges\"); nothing was changed"); err != nil {
		return nil, err
	}
	return c, refuseUnknownHosts(o, c)
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
		if r.Type == gate.TypeProxmoxVM && strings.HasSuffix(r.Name(), config.HolderSuffix) {
			if id, err := strconv.Atoi(r.ID); err == nil {
				ids = append(ids, id)
			}
		}
	}
	return c.Unprotect(o.ctx, ids)
}
