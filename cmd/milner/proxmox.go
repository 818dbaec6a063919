package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/pve"
	"github.com/milner/milner/stacks/config"
)

// proxmoxClient returns a PVE API client with the stack's endpoint, token
// and TLS setting; nil for a stack that declares no Proxmox substrate.
func proxmoxClient(st *engine.Stack, cfg *config.Config) (*pve.Client, error) {
	px := cfg.Substrate.Proxmox
	if px == nil || !cfg.Declares(config.LayerSubstrate) {
		return nil, nil
	}
	token, _ := st.Secret(config.Key(config.ProxmoxTokenKey))
	return pve.New(px.Endpoint, token, px.Insecure, nil)
}

// guardProxmox refuses an up, before anything is touched, when live VMs
// carry the VM ids or names of VMs the preview creates but are absent from
// the stack's state (empty state, orphans). It prints the exact adopt
// commands.
func guardProxmox(ctx context.Context, st *engine.Stack, cfg *config.Config, c *pve.Client, steps []gate.Step) error {
	declared, err := guard.DeclaredProxmox(steps, cfg.Cluster.Name)
	if err != nil {
		return err
	}
	resources, err := st.Resources(ctx)
	if err != nil {
		return err
	}
	inState := map[string]bool{}
	vms := map[string]guard.StateVM{}
	for _, r := range resources {
		if r.Type == gate.TypeProxmoxVM {
			inState[r.Name()] = true
			host, _ := r.Inputs["nodeName"].(string)
			vms[r.Name()] = guard.StateVM{ID: r.ID, Host: host}
		}
	}
	live, err := c.VMs(ctx)
	if err != nil {
		return err
	}
	configOf := func(host string, vmid int) map[string]any {
		cfg, err := c.VMConfig(ctx, host, vmid)
		if err != nil {
			return nil
		}
		return cfg
	}
	if err := refuseFindings(guard.CheckProxmox(st.Name(), declared, func(l string) bool { return inState[l] }, live, configOf), "live Proxmox VMs"); err != nil {
		return err
	}
	return refuseStale(guard.StaleProxmox(st.Name(), declared, func(l string) (guard.StateVM, bool) { v, ok := vms[l]; return v, ok }, live))
}

// preflightProxmox reads the token's effective privileges and names every
// one the program needs but lacks, before the preview asks the API
// anything. It returns the stack's PVE client (nil for another substrate).
func preflightProxmox(ctx context.Context, st *engine.Stack, cfg *config.Config) (*pve.Client, error) {
	c, err := proxmoxClient(st, cfg)
	if err != nil || c == nil {
		return nil, err
	}
	px := cfg.Substrate.Proxmox
	plan := pve.Plan{DiskDatastores: []string{px.OSDatastore, px.DataDatastore}, ImageDatastore: px.ImageDatastore, Bridge: px.Bridge}
	for _, n := range cfg.Nodes {
		plan.VMIDs = append(plan.VMIDs, n.VMID, config.HolderVMID(n.VMID))
	}
	perms, err := c.Permissions(ctx)
	if err != nil {
		return nil, err
	}
	missing := pve.Missing(perms, pve.Needs(plan))
	if len(missing) == 0 {
		return c, refuseUnknownHosts(ctx, c, cfg)
	}
	fmt.Fprintf(os.Stderr, "milner: refused before touching anything: the API token lacks %d privileges:\n", len(missing))
	for _, m := range missing {
		fmt.Fprintf(os.Stderr, "  - %s on %s (%s)\n", m.Priv, m.Path, m.Why)
	}
	return nil, refused("grant the missing privileges to the token (docs/proxmox.md \"Token privileges\"); nothing was changed")
}

// unprotectProxmoxHolders clears PVE's protection flag of the disk holders
// in the stack's state, for a confirmed teardown; nil, nil for a
// non-Proxmox stack. The returned reprotect protects again those still
// alive, for a teardown that failed part-way.
func unprotectProxmoxHolders(ctx context.Context, st *engine.Stack, cfg *config.Config, resources []engine.Resource) (func(context.Context) error, error) {
	c, err := proxmoxClient(st, cfg)
	if err != nil || c == nil {
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
	return c.Unprotect(ctx, ids)
}
