package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
)

func teardownCmd() *cobra.Command {
	f := &stackFlags{}
	var confirmName string
	cmd := &cobra.Command{
		Use:   "teardown",
		Short: "Remove the WHOLE stack, protected disks and data included, after typing the stack name",
		Long: `teardown is the only path that removes protected resources, and it is a full
teardown, never a recovery tool: a node is recovered with
'milner up --replace <node>'. It lists everything, asks you to type the
stack name, unprotects and destroys the whole stack, and removes the cluster's
contexts from the kubeconfig and talosconfig that 'milner kubeconfig' and
'milner talosconfig' wrote. If the destroy fails, what it had unprotected
and not yet deleted is protected again.`,
		Example: `  milner teardown --stack dev
  milner teardown --stack dev --yes   # scripts`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("teardown takes no target (got %v): it removes the whole stack or nothing; to recover one node use `milner up --replace <node>`", args)}
			}
			return nil
		},
		RunE: f.run(true, func(o *op) error {
			cfg, err := o.config()
			if err != nil {
				return err
			}
			cluster, st := cfg.Cluster.Name, o.st
			resources, err := o.resources()
			if err != nil {
				return err
			}
			fmt.Printf("milner teardown will DELETE every resource of stack %q (cluster %s), protected disks and data included:\n", st.Name(), cluster)
			var protected []resource.URN
			for _, r := range resources {
				if r.Type == string(resource.RootStackType) {
					continue
				}
				mark := ""
				if r.Protect {
					mark = " (protected)"
					protected = append(protected, r.URN)
				}
				fmt.Printf("  - %s %s%s\n", r.Type, r.Name(), mark)
			}
			switch {
			case confirmName != "" && confirmName != cluster:
				return refused("--confirm %q is not the cluster name %q; nothing was deleted", confirmName, cluster)
			case confirmName == "":
				if err := o.confirm("This cannot be undone."); err != nil {
					return err
				}
			}

			// Proxmox holders also carry PVE's own protection flag, which
			// Pulumi's unprotect does not clear: clear it here, and set it
			// again on what is left if the destroy fails.
			reprotect, err := unprotectProxmoxHolders(o)
			if err != nil {
				return err
			}
			// Putting protection back runs even after an interrupt: it is
			// what leaves the holders safe when the destroy stopped.
			keep := context.WithoutCancel(o.ctx)
			err = st.UnprotectAll(o.ctx)
			if err == nil {
				_, err = st.Destroy(o.ctx)
			}
			if err != nil {
				err = errors.Join(err, reprotect(keep))
				// Put the protect flag back on what is left of what it had.
				left, rerr := st.Resources(keep)
				if rerr == nil {
					rerr = st.Protect(keep, slices.DeleteFunc(protected, func(u resource.URN) bool {
						return !slices.ContainsFunc(left, func(r engine.Resource) bool { return r.URN == u })
					}))
				}
				return errors.Join(err, rerr, fmt.Errorf("teardown of %q stopped; %d resources left, the protected ones protected again; fix the error and run it again", st.Name(), len(left)))
			}
			for _, c := range []clientConfig{kubeconfig, talosconfig} {
				if err := c.removeFrom(cluster, ""); err != nil {
					return err
				}
			}
			fmt.Printf("milner teardown: stack %q is empty; the %s contexts are removed from the kubeconfig and talosconfig\n", st.Name(), cluster)
			return nil
		}),
	}
	f.addStack(cmd, true)
	f.addYes(cmd)
	cmd.Flags().StringVar(&confirmName, "confirm", "", "the cluster name (milner:cluster.name), for scripts instead of typing the stack name")
	_ = cmd.Flags().MarkDeprecated("confirm", "use --yes (with --stack)")
	return cmd
}
