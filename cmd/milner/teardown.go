package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/milner/milner/internal/engine"
)

func init() {
	register("teardown", "remove the WHOLE stack, protected disks included, after typed confirmation", runTeardown)
}

// runTeardown is `milner teardown --stack <name> [--confirm <name>]`: the
// only path that removes protected resources. It is a full teardown, never a
// recovery tool: a node is recovered with `milner up --replace <node>`.
func runTeardown(args []string) error {
	fs := flag.NewFlagSet("teardown", flag.ContinueOnError)
	eo := engineFlags(fs)
	confirm := fs.String("confirm", "", "the stack name, for scripts (instead of typing it)")
	if err := parseFlags(fs, args, "stack"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("refused: teardown takes no target (got %v): it removes the whole stack or nothing; to recover one node use `milner up --stack %s --replace <node>`", fs.Args(), eo.Stack)
	}
	ctx, stop, st, err := openStack(eo)
	if err != nil {
		return err
	}
	defer stop()
	resources, err := st.Resources(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("milner teardown will DELETE every resource of stack %q, protected disks and data included:\n", eo.Stack)
	for _, r := range resources {
		if r.Type == "pulumi:pulumi:Stack" {
			continue
		}
		mark := ""
		if r.Protect {
			mark = " (protected)"
		}
		fmt.Printf("  - %s %s%s\n", r.Type, r.URN[strings.LastIndex(r.URN, "::")+2:], mark)
	}
	if *confirm == "" {
		fmt.Printf("Type the stack name (%s) to confirm: ", eo.Stack)
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		*confirm = strings.TrimSpace(line)
	}
	if *confirm != eo.Stack {
		return fmt.Errorf("refused: confirmation %q is not the stack name %q; nothing was deleted", *confirm, eo.Stack)
	}

	// Proxmox holders also carry PVE's own protection flag, which Pulumi's
	// unprotect does not clear: clear it here, and set it again on what is
	// left if the destroy fails.
	reprotect, err := unprotectProxmoxHolders(ctx, st, resources)
	if err != nil {
		return err
	}
	if err := st.UnprotectAll(ctx); err != nil {
		return reprotectAfter(ctx, reprotect, err)
	}
	if _, err := st.Destroy(ctx); err != nil {
		return reprotectAfter(ctx, reprotect, err)
	}
	left, err := st.Resources(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("teardown of %q left %d resources in state; run it again after fixing the error above", eo.Stack, len(left))
	}
	// The local client files an up wrote for this stack.
	for _, f := range clientFiles(*eo) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	fmt.Printf("milner teardown: stack %q is empty; its kubeconfig and talosconfig files are removed\n", eo.Stack)
	return nil
}

// reprotectAfter sets PVE protection again on the holders a failed
// teardown left, and returns the failure (with the reprotect's own error).
func reprotectAfter(ctx context.Context, reprotect func(context.Context) error, cause error) error {
	if reprotect == nil {
		return cause
	}
	return errors.Join(cause, reprotect(ctx))
}

// clientFiles are the kubeconfig and talosconfig files `milner up` writes
// for a stack.
func clientFiles(o engine.Options) []string {
	dir := o.StateDir
	if dir == "" {
		dir = filepath.Join(o.Repo, engine.DefaultStateDir)
	}
	base := filepath.Join(dir, "clients", o.Stack)
	return []string{base + ".kubeconfig", base + ".talosconfig"}
}
