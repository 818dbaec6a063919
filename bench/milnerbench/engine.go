package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pulumi/pulumi-libvirt/sdk/go/libvirt"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/stacks"
)

// passphrase encrypts the bench stacks' (empty) secrets.
const passphrase = "milner-bench"

// stopped is the -stopped flag of the engine verbs.
var stopped bool

// engineFlags declares the flags of the engine verbs.
func engineFlags(fs *flag.FlagSet) *engine.Options {
	o := &engine.Options{Passphrase: passphrase}
	fs.BoolVar(&stopped, "stopped", false, "define the domains without starting them (see stoppedProgram)")
	fs.StringVar(&o.Repo, "repo", ".", "repository root (holds .tools/bin)")
	fs.StringVar(&o.Stack, "stack", "", "stack name (required)")
	fs.StringVar(&o.ConfigFile, "config", "", "stack file (required)")
	fs.StringVar(&o.StateDir, "state", "", "file backend directory (required)")
	return o
}

// open parses the flags and opens the stack.
func open(fs *flag.FlagSet, o *engine.Options, args []string) (*engine.Stack, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.Stack == "" || o.ConfigFile == "" || o.StateDir == "" {
		return nil, fmt.Errorf("-stack, -config and -state are required")
	}
	if stopped {
		o.Program = stoppedProgram
	}
	return engine.Open(context.Background(), *o)
}

// runOpen creates or selects the stack and sets its config; no operation.
func runOpen(args []string) error {
	fs := flag.NewFlagSet("open", flag.ContinueOnError)
	_, err := open(fs, engineFlags(fs), args)
	return err
}

// runPreview is `milner preview [--refresh]` on a bench stack file.
func runPreview(args []string) error {
	fs := flag.NewFlagSet("preview", flag.ContinueOnError)
	o := engineFlags(fs)
	refresh := fs.Bool("refresh", false, "read every resource back first")
	st, err := open(fs, o, args)
	if err != nil {
		return err
	}
	r, err := st.Preview(context.Background(), *refresh)
	summarize("preview", r)
	return err
}

// runUp is `milner up` on a bench stack file.
func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	st, err := open(fs, engineFlags(fs), args)
	if err != nil {
		return err
	}
	r, err := st.Up(context.Background())
	summarize("up", r)
	return err
}

// runReset removes the stack from the backend and creates it again, empty,
// with its config: the "from empty" starting point of P3. The libvirt
// objects are removed by bench/wipe.sh, not by a (slow) destroy.
func runReset(args []string) error {
	fs := flag.NewFlagSet("reset", flag.ContinueOnError)
	o := engineFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	work := filepath.Join(o.StateDir, "work")
	if _, err := os.Stat(filepath.Join(work, "Pulumi.yaml")); err == nil {
		cmd := exec.Command(filepath.Join(o.Repo, ".tools", "bin", "pulumi"), "stack", "rm", "--force", "--yes", "--stack", o.Stack)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PULUMI_BACKEND_URL=file://"+o.StateDir,
			"PULUMI_CONFIG_PASSPHRASE="+passphrase, "PULUMI_SKIP_UPDATE_CHECK=true")
		if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "no stack named") {
			return fmt.Errorf("stack rm: %w: %s", err, out)
		}
	}
	_, err := open(fs, o, args)
	return err
}

// summarize prints the step counts of an operation on stderr, so that the
// bench log shows what each timed run did.
func summarize(op string, r *engine.Result) {
	if r == nil {
		return
	}
	var parts []string
	for k, v := range r.Summary {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	fmt.Fprintf(os.Stderr, "milnerbench %s: %s\n", op, strings.Join(parts, " "))
}

// stoppedProgram is stacks.Program with every domain defined but not started
// (running=false), for the large-N bench: Milner starts every domain, and 60
// idle TCG guests would eat a core of this 2-core machine during the
// measurements. Terraform's side gets the same (var.running). The
// transformation runs in-process, before registration: no extra RPC.
func stoppedProgram(ctx *pulumi.Context) error {
	err := ctx.RegisterStackTransformation(func(a *pulumi.ResourceTransformationArgs) *pulumi.ResourceTransformationResult {
		d, ok := a.Props.(*libvirt.DomainArgs)
		if !ok {
			return nil
		}
		d.Running = pulumi.Bool(false)
		return &pulumi.ResourceTransformationResult{Props: d, Opts: a.Opts}
	})
	if err != nil {
		return err
	}
	return stacks.Program(ctx)
}
