package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/pve"
	"github.com/milner/milner/stacks/config"
)

// stackSource serves a stack's raw config and its decrypted secrets to
// config.Load, as the program would see them.
type stackSource struct {
	st  *engine.Stack
	cfg map[string]string
}

func (s stackSource) GetConfig(key string) (string, bool) {
	if v, ok := s.st.Secret(key); ok {
		return v, true
	}
	v, ok := s.cfg[key]
	return v, ok
}

func (s stackSource) IsConfigSecret(key string) bool {
	_, ok := s.st.Secret(key)
	return ok
}

// proxmoxClient loads the stack's config and returns a PVE API client with
// its endpoint, token and TLS setting; nil, nil for a non-Proxmox stack.
func proxmoxClient(st *engine.Stack, raw map[string]string) (*pve.Client, *config.Config, error) {
	cfg, err := config.Load(stackSource{st, raw})
	if err != nil {
		return nil, nil, err
	}
	px := cfg.Substrate.Proxmox
	if px == nil {
		return nil, nil, nil
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(os.Stderr, "milner: warning: %s\n", w)
	}
	token, _ := st.Secret(config.Namespace + ":" + config.ProxmoxTokenKey)
	c, err := pve.New(px.Endpoint, token, px.Insecure, nil)
	return c, cfg, err
}

// guardProxmox refuses an up, before anything is touched, when the API
// token lacks a privilege the program needs, or when live VMs carry the
// stack's VM ids or names but are absent from its state (empty state,
// orphans). It prints what is missing and the exact adopt commands.
func guardProxmox(ctx context.Context, st *engine.Stack, raw map[string]string) error {
	c, cfg, err := proxmoxClient(st, raw)
	if err != nil || c == nil {
		return err
	}
	declared, err := guard.DeclaredProxmox(st.Name(), raw)
	if err != nil {
		return err
	}
	if err := preflightProxmox(ctx, c, cfg, declared); err != nil {
		return err
	}
	if err := refuseUnknownHosts(ctx, c, cfg); err != nil {
		return err
	}
	resources, err := st.Resources(ctx)
	if err != nil {
		return err
	}
	inState := map[string]bool{}
	vms := map[string]guard.StateVM{}
	for _, r := range resources {
		if r.Type == guard.TypeProxmoxVM {
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
// one the program needs but lacks.
func preflightProxmox(ctx context.Context, c *pve.Client, cfg *config.Config, declared []guard.DeclaredVM) error {
	px := cfg.Substrate.Proxmox
	plan := pve.Plan{DiskDatastores: []string{px.OSDatastore, px.DataDatastore}, ImageDatastore: px.ImageDatastore, Bridge: px.Bridge}
	for _, d := range declared {
		plan.VMIDs = append(plan.VMIDs, d.VMID)
	}
	perms, err := c.Permissions(ctx)
	if err != nil {
		return err
	}
	missing := pve.Missing(perms, pve.Needs(plan))
	if len(missing) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "milner: refused before touching anything: the API token lacks %d privileges:\n", len(missing))
	for _, m := range missing {
		fmt.Fprintf(os.Stderr, "  - %s on %s (%s)\n", m.Priv, m.Path, m.Why)
	}
	return refused("grant the missing privileges to the token (docs/proxmox.md \"Token privileges\"); nothing was changed")
}

// unprotectProxmoxHolders clears PVE's protection flag of the disk holders
// in the stack's state, for a confirmed teardown; nil, nil for a
// non-Proxmox stack. The returned reprotect protects again those still
// alive, for a teardown that failed part-way.
func unprotectProxmoxHolders(ctx context.Context, st *engine.Stack, raw map[string]string, resources []engine.Resource) (func(context.Context) error, error) {
	c, _, err := proxmoxClient(st, raw)
	if err != nil || c == nil {
		return nil, err
	}
	var ids []int
	for _, r := range resources {
		// The bpg provider's VM id is the PVE VM id.
		if r.Type == guard.TypeProxmoxVM && strings.HasSuffix(r.Name(), "-disks") {
			if id, err := strconv.Atoi(r.ID); err == nil {
				ids = append(ids, id)
			}
		}
	}
	return c.Unprotect(ctx, ids)
}
