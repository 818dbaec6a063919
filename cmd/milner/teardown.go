package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/milner/milner/internal/engine"
)

func init() {
	register("teardown", "remove the WHOLE stack, protected disks included, after typed confirmation", runTeardown)
}

// runTeardown is `milner teardown --stack <name> [--confirm <cluster>]`: the
// only path that removes protected resources. It is a full teardown, never a
// recovery tool: a node is recovered with `milner up --replace <node>`.
func runTeardown(args []string) error {
	fs := flag.NewFlagSet("teardown", flag.ContinueOnError)
	eo := engineFlags(fs)
	confirm := fs.String("confirm", "", "the cluster name (milner:cluster.name), for scripts (instead of typing it)")
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
	if err := teardown(ctx, st, eo.Stack, clusterName(st.Config()), *confirm, os.Stdin, os.Stdout); err != nil {
		return err
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

// teardownStack is what a teardown needs of a stack (engine.Stack).
type teardownStack interface {
	Resources(ctx context.Context) ([]engine.Resource, error)
	UnprotectAll(ctx context.Context) error
	Protect(ctx context.Context, urns []string) error
	Destroy(ctx context.Context) (*engine.Result, error)
}

// teardown lists the stack, asks for the cluster name (the name of what is
// destroyed, not the stack's: several stacks may share a file, one cluster
// is what is lost), unprotects and destroys. When the destroy fails or
// leaves resources, every resource that was protected and is still in state
// is protected again, so a half-done teardown leaves no disk deletable by a
// later plain `pulumi destroy`.
func teardown(ctx context.Context, st teardownStack, stack, cluster, confirm string, in io.Reader, out io.Writer) error {
	if cluster == "" {
		return fmt.Errorf("refused: stack %q names no cluster (milner:cluster.name) to confirm; nothing was deleted", stack)
	}
	resources, err := st.Resources(ctx)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "milner teardown will DELETE every resource of cluster %q (stack %q), protected disks and data included:\n", cluster, stack)
	var protected []string
	for _, r := range resources {
		if r.Type == "pulumi:pulumi:Stack" {
			continue
		}
		mark := ""
		if r.Protect {
			mark = " (protected)"
			protected = append(protected, r.URN)
		}
		_, _ = fmt.Fprintf(out, "  - %s %s%s\n", r.Type, r.URN[strings.LastIndex(r.URN, "::")+2:], mark)
	}
	if confirm == "" {
		_, _ = fmt.Fprintf(out, "Type the cluster name (%s) to confirm: ", cluster)
		line, _ := bufio.NewReader(in).ReadString('\n')
		confirm = strings.TrimSpace(line)
	}
	if confirm != cluster {
		return fmt.Errorf("refused: confirmation %q is not the cluster name %q; nothing was deleted", confirm, cluster)
	}

	if err := st.UnprotectAll(ctx); err != nil {
		return reprotect(ctx, st, protected, err)
	}
	if _, err := st.Destroy(ctx); err != nil {
		return reprotect(ctx, st, protected, err)
	}
	left, err := st.Resources(ctx)
	if err != nil {
		return reprotect(ctx, st, protected, err)
	}
	if len(left) > 0 {
		return reprotect(ctx, st, protected, fmt.Errorf("teardown of %q left %d resources in state; run it again after fixing the error above", stack, len(left)))
	}
	return nil
}

// reprotect gives the protect flag back to every resource of protected that
// is still in state, and returns cause (with any error of doing so).
func reprotect(ctx context.Context, st teardownStack, protected []string, cause error) error {
	left, err := st.Resources(ctx)
	if err != nil {
		return errors.Join(cause, fmt.Errorf("re-protect: %w; run `pulumi state protect` on the stack's disks by hand", err))
	}
	inState := map[string]bool{}
	for _, r := range left {
		inState[r.URN] = true
	}
	var again []string
	for _, u := range protected {
		if inState[u] {
			again = append(again, u)
		}
	}
	if err := st.Protect(ctx, again); err != nil {
		return errors.Join(cause, fmt.Errorf("re-protect: %w", err))
	}
	return fmt.Errorf("%w (the %d protected resources still in state are protected again)", cause, len(again))
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
