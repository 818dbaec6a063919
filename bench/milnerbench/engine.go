package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"

	"github.com/pulumi/pulumi-libvirt/sdk/go/libvirt"
	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/stacks"
)

// passphrase encrypts the bench stacks' (empty) secrets.
const passphrase = "milner-bench"

// stopped is the -stopped flag of the engine verbs.
var stopped bool

// cpuProfile is the -cpuprofile flag of the engine verbs: where the driver's
// CPU profile goes (BENCHMARKS.md, "Where Milner's time goes").
var cpuProfile string

// stopProfile ends the CPU profile -cpuprofile started; main calls it.
var stopProfile = func() {}

// benchOptions are the engine options and the bench's own paths.
type benchOptions struct {
	engine.Options
	repo, config, state string
}

// engineFlags declares the flags of the engine verbs.
func engineFlags(fs *flag.FlagSet) *benchOptions {
	o := &benchOptions{Options: engine.Options{Passphrase: passphrase}}
	fs.BoolVar(&stopped, "stopped", false, "define the domains without starting them (see stoppedProgram)")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write the driver's CPU profile (the engine and the program) to this file")
	fs.StringVar(&o.repo, "repo", ".", "repository root (holds Pulumi.yaml and .tools/bin)")
	fs.StringVar(&o.Stack, "stack", "", "stack name (required)")
	fs.StringVar(&o.config, "config", "", "stack file (required)")
	fs.StringVar(&o.state, "state", "", "file backend directory (required)")
	return o
}

// open parses the flags, makes <state>/project the stack's project (the
// repo's Pulumi.yaml, -config as Pulumi.<stack>.yaml, its passphrase salt
// kept) and opens the stack there, as milner does a repo's.
func open(fs *flag.FlagSet, o *benchOptions, args []string) (*engine.Stack, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.Stack == "" || o.config == "" || o.state == "" {
		return nil, fmt.Errorf("-stack, -config and -state are required")
	}
	if stopped {
		o.Program = stoppedProgram
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		stopProfile = func() { pprof.StopCPUProfile(); _ = f.Close() }
	}
	var err error
	if o.Dir, err = project(o.repo, o.state, o.Stack, o.config); err != nil {
		return nil, err
	}
	o.Tools = filepath.Join(o.repo, ".tools", "bin")
	o.Backend = "file://" + o.state
	return engine.Open(context.Background(), o.Options)
}

// project writes the bench stack's project directory and returns it.
func project(repo, state, stack, config string) (string, error) {
	dir := filepath.Join(state, "project")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	proj, err := os.ReadFile(filepath.Join(repo, "Pulumi.yaml"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), proj, 0o600); err != nil {
		return "", err
	}
	file := filepath.Join(dir, "Pulumi."+stack+".yaml")
	cfg, err := os.ReadFile(config)
	if err != nil {
		return "", err
	}
	// The salt the engine wrote on the stack's first use stays.
	if old, err := os.ReadFile(file); err == nil {
		if line, _, ok := strings.Cut(string(old), "\n"); ok && strings.HasPrefix(line, "encryptionsalt: ") {
			cfg = append([]byte(line+"\n"), cfg...)
		}
	}
	return dir, os.WriteFile(file, cfg, 0o600)
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
	r, _, err := st.Preview(context.Background(), engine.PlanOptions{Refresh: *refresh})
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
	// The stack goes from the file backend in-process, as `pulumi stack rm
	// --force` does (the bench needs no CLI).
	if proj, err := workspace.LoadProject(filepath.Join(o.repo, "Pulumi.yaml")); err != nil {
		return err
	} else if err := removeStack(o.state, o.Stack, proj); err != nil {
		return fmt.Errorf("stack rm %s: %w", o.Stack, err)
	}
	_, err := open(fs, o, args)
	return err
}

// removeStack removes the stack from the file backend at state, if it is there.
func removeStack(state, stack string, proj *workspace.Project) error {
	if _, err := os.Stat(state); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	ctx := context.Background()
	b, err := diy.New(ctx, cmdutil.Diag(), "file://"+state, proj)
	if err != nil {
		return err
	}
	ref, err := b.ParseStackReference(stack)
	if err != nil {
		return err
	}
	st, err := b.GetStack(ctx, ref)
	if err != nil || st == nil {
		return err
	}
	_, err = b.RemoveStack(ctx, st, true, true)
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

// runFlip is `milnerbench flip -stack S -state D -config A -other B`: P5's
// prepare step. It writes whichever of the stack files A and B the
// project's Pulumi.<S>.yaml is not now, so every timed `milner up` ships
// one memory change (node 2's), as Terraform's side does with flipTF.
func runFlip(args []string) error {
	fs := flag.NewFlagSet("flip", flag.ContinueOnError)
	o := engineFlags(fs)
	other := fs.String("other", "", "the other stack file (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cur, err := os.ReadFile(filepath.Join(o.state, "project", "Pulumi."+o.Stack+".yaml"))
	if err != nil {
		return err
	}
	a, err := os.ReadFile(o.config)
	if err != nil {
		return err
	}
	next := o.config
	if strings.HasSuffix(string(cur), string(a)) {
		next = *other
	}
	_, err = project(o.repo, o.state, o.Stack, next)
	return err
}

// runFlipTF is `milnerbench flip-tf -dir DIR`: Terraform's side of P5. It
// adds or removes p5.auto.tfvars.json (a copy of p4.tfvars.json, node 2's
// memory), which Terraform loads on top of terraform.tfvars.json.
func runFlipTF(args []string) error {
	fs := flag.NewFlagSet("flip-tf", flag.ContinueOnError)
	dir := fs.String("dir", "", "the Terraform directory (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	auto := filepath.Join(*dir, "p5.auto.tfvars.json")
	if _, err := os.Stat(auto); err == nil {
		return os.Remove(auto)
	}
	p4, err := os.ReadFile(filepath.Join(*dir, "p4.tfvars.json"))
	if err != nil {
		return err
	}
	return os.WriteFile(auto, p4, 0o644)
}
