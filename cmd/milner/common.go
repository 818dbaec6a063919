package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks/config"
)

// stackFlags are the flags of every verb that opens a stack.
type stackFlags struct {
	stack string
	json  bool
	yes   bool
	// program overrides stacks.Program (up sets per-run options on it).
	program pulumi.RunFunc
}

// addStack declares --stack, completed from Pulumi.*.yaml. Without it the
// verb works on the current stack (name), unless explicit: a verb that
// destroys or overwrites (teardown, state restore, secrets import,
// upgrade) never falls back to it, so the stack it changes is always typed.
func (f *stackFlags) addStack(cmd *cobra.Command, explicit bool) {
	usage := "stack name; its config is Pulumi.<stack>.yaml (default: the stack 'pulumi stack select' chose)"
	if explicit {
		usage = "stack name; its config is Pulumi.<stack>.yaml (required: this verb destroys or overwrites)"
	}
	cmd.Flags().StringVarP(&f.stack, "stack", "s", "", usage)
	if explicit {
		_ = cmd.MarkFlagRequired("stack")
	}
	_ = cmd.RegisterFlagCompletionFunc("stack", completeStacks)
}

// name is --stack, else the current stack of the project's backend
// (engine.CurrentStack: what 'pulumi stack select' chose, or PULUMI_STACK).
func (f *stackFlags) name(cmd *cobra.Command) (string, error) {
	if f.stack != "" {
		return f.stack, nil
	}
	name, err := engine.CurrentStack(cmd.Context(), projectDir(cmd))
	if errors.Is(err, engine.ErrNoCurrentStack) {
		return "", usageError{errors.New("no stack: give --stack <name>, or select one with 'pulumi stack select <name>'")}
	}
	if err != nil {
		return "", err
	}
	f.stack = name
	return name, nil
}

// addYes declares -y/--yes, which skips the typed confirmation.
func (f *stackFlags) addYes(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "skip the confirmation (typing the stack name); needed without a terminal")
}

// addJSON declares --json.
func (f *stackFlags) addJSON(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.json, "json", false, "print the result as JSON on stdout (Pulumi's progress goes to stderr)")
}

// emit prints v as JSON on stdout when asJSON (--json), then returns err.
func emit(asJSON bool, v any, err error) error {
	if asJSON {
		if jerr := writeJSON(os.Stdout, v); jerr != nil {
			return jerr
		}
	}
	return err
}

// projectDir is the -C/--cwd of the command line.
func projectDir(cmd *cobra.Command) string {
	dir, _ := cmd.Root().PersistentFlags().GetString("cwd")
	return dir
}

// op is one verb's open stack. Its config is loaded once, through the
// program's own loader (config.Load: strict decode, defaults, every
// problem at once) with its secrets decrypted as the program sees them,
// and its state's resources are read once, both on first use: a verb that
// needs neither (state unlock) works on a stack whose config does not load.
type op struct {
	// ctx is the command's context, which the first interrupt cancels
	// (interrupt.go).
	ctx context.Context
	st  *engine.Stack
	f   *stackFlags
	// args are the verb's arguments.
	args []string
	// out is where the verb's text and Pulumi's progress go: stderr under
	// --json, so that stdout is only the JSON.
	out io.Writer

	cfg  *config.Config
	file *stackfile.Stack // the loaded stack file cfg is from
	res  []engine.Resource
	read bool           // res was read
	outs map[string]any // the stack's outputs in the clear, read once
}

// config is the stack's config.
func (o *op) config() (*config.Config, error) {
	if o.cfg == nil {
		file, err := o.st.Load()
		if err != nil {
			return nil, err
		}
		o.file, o.cfg = file, file.Config
	}
	return o.cfg, nil
}

// resources are the resources in the stack's state when first asked.
func (o *op) resources() ([]engine.Resource, error) {
	if !o.read {
		res, err := o.st.Resources(o.ctx)
		if err != nil {
			return nil, err
		}
		o.res, o.read = res, true
	}
	return o.res, nil
}

// outputs are the stack's outputs, secrets in the clear, read once.
func (o *op) outputs() (map[string]any, error) {
	if o.outs == nil {
		outs, err := o.st.Outputs(o.ctx, true)
		if err != nil {
			return nil, err
		}
		o.outs = outs
	}
	return o.outs, nil
}

// find is the resource in state of type typ named name, or nil.
func (o *op) find(typ, name string) (*engine.Resource, error) {
	res, err := o.resources()
	if err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(res, func(r engine.Resource) bool { return r.Type == typ && (name == "" || r.Name() == name) }); i >= 0 {
		return &res[i], nil
	}
	return nil, nil
}

// confirm asks the user to type the stack name, unless --yes.
func (o *op) confirm(question string) error {
	if o.f.yes {
		return nil
	}
	return confirm(o.ctx, os.Stdin, o.out, question, o.st.Name())
}

// run is the RunE of a verb on one stack: it opens the stack, under
// Milner's own lock (engine.Stack.Lock) when locked, for an operation that
// changes it, and runs do on it. Another milner holding the lock is a
// refusal: nothing was changed, and the command says so at once instead
// of waiting.
func (f *stackFlags) run(locked bool, do func(*op) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		name, err := f.name(cmd)
		if err != nil {
			return err
		}
		o := &op{ctx: cmd.Context(), f: f, out: os.Stdout, args: args}
		if f.json {
			o.out = os.Stderr
		}
		opts := engine.Options{Stack: name, Dir: projectDir(cmd), Progress: o.out, Program: f.program, Terminate: terminateOf(o.ctx), Command: cmd.CommandPath()}
		if o.st, err = engine.Open(o.ctx, opts); err != nil {
			return err
		}
		if locked {
			unlock, err := o.st.Lock(o.ctx)
			if errors.Is(err, engine.ErrLocked) {
				return refused("%v: another milner is changing this stack; nothing was changed, run it again when that one has finished", err)
			}
			if err != nil {
				return err
			}
			defer unlock()
		}
		return do(o)
	}
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// refuseList prints, when there are problems, the header (formatted with
// their count) and each problem on stderr, and returns the refusal;
// otherwise nil.
func refuseList[T any](problems []T, header string, refusal string, a ...any) error {
	if len(problems) == 0 {
		return nil
	}
	if header != "" {
		fmt.Fprintf(os.Stderr, "milner: "+header+":\n", len(problems))
	}
	for _, p := range problems {
		fmt.Fprintf(os.Stderr, "  - %v\n", p)
	}
	return refused(refusal, a...)
}

// completeStacks completes stack names from the Pulumi.<stack>.yaml files.
func completeStacks(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	files, err := stackfile.Files(projectDir(cmd))
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, f := range files {
		names = append(names, stackfile.Name(f))
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completeNodes completes node names from the --stack's stack file.
func completeNodes(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	stack, _ := cmd.Flags().GetString("stack")
	if stack == "" {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	s, err := stackfile.Read(stackfile.Path(projectDir(cmd), stack), nil)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, n := range s.Config.Nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names, cobra.ShellCompDirectiveNoFileComp
}

// confirm is Milner's one confirmation: it asks the user to type the stack
// name on in; anything else declines. It refuses to ask when in is not a
// terminal (a script passes --yes), never accepts an empty word (a bare
// Enter would type it), compares the whole typed line (trimmed) with the
// name, and an interrupt while it waits declines.
func confirm(ctx context.Context, in *os.File, out io.Writer, question, stack string) error {
	if strings.TrimSpace(stack) == "" {
		return refused("no stack name to type as the confirmation; pass --yes to go on without the prompt; nothing was changed")
	}
	if fi, err := in.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return refused("standard input is not a terminal, so nothing can be confirmed; pass --yes to go on without the prompt")
	}
	_, _ = fmt.Fprintf(out, "%s Type the stack name (%s) to go on: ", question, stack)
	typed := make(chan string, 1)
	go func() {
		// The whole line, not its first word: fmt.Fscanln would read
		// "dev and more" as "dev".
		line, _ := bufio.NewReader(in).ReadString('\n')
		typed <- strings.TrimSpace(line)
	}()
	select {
	case <-ctx.Done():
		return fmt.Errorf("not confirmed: %w; nothing was changed", ctx.Err())
	case line := <-typed:
		if line != stack {
			return refused("not confirmed (typed %q, want the stack name %q); nothing was changed", line, stack)
		}
	}
	return nil
}
