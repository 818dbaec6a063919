package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/docs"
	"github.com/milner/milner/internal/engine"
)

// stackFlags are the flags of every verb that opens a stack.
type stackFlags struct {
	stack string
	json  bool
	// program overrides stacks.Program (up sets per-run options on it).
	program pulumi.RunFunc
}

// addStack declares --stack, completed from Pulumi.*.yaml; without it the
// verb works on the current stack (currentStack).
func (f *stackFlags) addStack(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.stack, "stack", "s", "", "stack name; its config is Pulumi.<stack>.yaml (default: the stack 'pulumi stack select' chose)")
	_ = cmd.RegisterFlagCompletionFunc("stack", completeStacks)
}

// addExplicitStack declares --stack for a verb that destroys or overwrites
// (teardown, state restore, secrets import, upgrade): it never falls back
// to the current stack, so the stack it changes is always typed.
func (f *stackFlags) addExplicitStack(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.stack, "stack", "s", "", "stack name; its config is Pulumi.<stack>.yaml (required: this verb destroys or overwrites)")
	_ = cmd.MarkFlagRequired("stack")
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
func addYes(cmd *cobra.Command, yes *bool) {
	cmd.Flags().BoolVarP(yes, "yes", "y", false, "skip the confirmation (typing the stack name); needed without a terminal")
}

// addJSON declares --json.
func (f *stackFlags) addJSON(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.json, "json", false, "print the result as JSON on stdout (Pulumi's progress goes to stderr)")
}

// projectDir is the -C/--cwd of the command line.
func projectDir(cmd *cobra.Command) string {
	dir, _ := cmd.Root().PersistentFlags().GetString("cwd")
	return dir
}

// open opens the stack under the command's context, which the first
// interrupt cancels (interrupt.go); the caller defers stop. With --json,
// Pulumi's progress goes to stderr so that stdout is only the JSON.
func (f *stackFlags) open(cmd *cobra.Command) (ctx context.Context, stop context.CancelFunc, st *engine.Stack, err error) {
	if _, err := f.name(cmd); err != nil {
		return nil, nil, nil, err
	}
	ctx, stop = context.WithCancel(cmd.Context())
	var progress io.Writer = os.Stdout
	if f.json {
		progress = os.Stderr
	}
	o := engine.Options{Stack: f.stack, Dir: projectDir(cmd), Progress: progress, Program: f.program, Terminate: terminateOf(ctx), Command: cmd.CommandPath()}
	if st, err = engine.Open(ctx, o); err != nil {
		stop()
	}
	return ctx, stop, st, err
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// completeStacks completes stack names from the Pulumi.<stack>.yaml files.
func completeStacks(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	files, err := docs.StackFiles(projectDir(cmd))
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "Pulumi."), ".yaml"))
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completeNodes completes node names from the --stack's stack file.
func completeNodes(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	stack, _ := cmd.Flags().GetString("stack")
	if stack == "" {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	s, err := docs.ReadStack(filepath.Join(projectDir(cmd), "Pulumi."+stack+".yaml"))
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, n := range s.Config.Nodes {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	return names, cobra.ShellCompDirectiveNoFileComp
}

// confirm is Milner's one confirmation: it asks the user to type the stack
// name on in; anything else declines. It refuses to ask when in is not a
// terminal (a script passes --yes), never accepts an empty word (a bare
// Enter would type it), and an interrupt while it waits declines.
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
		var line string
		_, _ = fmt.Fscanln(in, &line)
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

// openLocked opens the stack and takes Milner's own lock on it
// (engine.Stack.Lock), for an operation that changes it; stop also
// releases the lock. Another milner holding it is a refusal: nothing was
// changed, and the command says so at once instead of waiting.
func (f *stackFlags) openLocked(cmd *cobra.Command) (ctx context.Context, stop context.CancelFunc, st *engine.Stack, err error) {
	if ctx, stop, st, err = f.open(cmd); err != nil {
		return nil, nil, nil, err
	}
	unlock, err := st.Lock(ctx)
	if err != nil {
		stop()
		if errors.Is(err, engine.ErrLocked) {
			err = refused("%v: another milner is changing this stack; nothing was changed, run it again when that one has finished", err)
		}
		return nil, nil, nil, err
	}
	cancel := stop
	return ctx, func() { unlock(); cancel() }, st, nil
}

// run is the RunE of a verb on one stack: it opens the stack (under
// Milner's stack lock when locked), runs do and closes the stack again.
func (f *stackFlags) run(locked bool, do func(ctx context.Context, st *engine.Stack) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		open := f.open
		if locked {
			open = f.openLocked
		}
		ctx, stop, st, err := open(cmd)
		if err != nil {
			return err
		}
		defer stop()
		return do(ctx, st)
	}
}
