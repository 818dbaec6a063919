package pve

import (
	"context"
	"errors"
	"fmt"
)

// Unprotect clears PVE's protection flag of the QEMU guests vmids, wherever
// in the cluster they run, for a confirmed teardown: PVE refuses to destroy
// a protected guest ("VM is protected"), whatever the Pulumi state says.
// Guests that do not exist are skipped. It returns reprotect, which sets
// the flag again on those of them that still exist: a teardown that fails
// part-way leaves what it had not deleted protected again.
func (c *Client) Unprotect(ctx context.Context, vmids []int) (reprotect func(context.Context) error, err error) {
	hosts, err := c.hostsOf(ctx)
	if err != nil {
		return nil, err
	}
	var done []int
	reprotect = func(ctx context.Context) error {
		now, err := c.hostsOf(ctx)
		if err != nil {
			return fmt.Errorf("reprotect: %w", err)
		}
		var errs []error
		for _, id := range done {
			if host, ok := now[id]; ok {
				errs = append(errs, c.SetProtection(ctx, host, id, true))
			}
		}
		return errors.Join(errs...)
	}
	for _, id := range vmids {
		host, ok := hosts[id]
		if !ok {
			continue
		}
		if err := c.SetProtection(ctx, host, id, false); err != nil {
			return nil, errors.Join(fmt.Errorf("unprotect VM %d: %w", id, err), reprotect(ctx))
		}
		done = append(done, id)
	}
	return reprotect, nil
}

// hostsOf maps the id of every QEMU guest of the cluster to its host.
func (c *Client) hostsOf(ctx context.Context) (map[int]string, error) {
	vms, err := c.VMs(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, v := range vms {
		if v.Type == "qemu" {
			out[v.VMID] = v.Node
		}
	}
	return out, nil
}
