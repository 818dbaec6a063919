package pipeline

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks/config"
)

// Op is one verb's open stack: what every stage reads. Its config is
// loaded once, through the program's own loader (config.Load: strict
// decode, defaults, every problem at once) with its secrets decrypted as
// the program sees them, and its state's resources and outputs are read
// once, each on first use: a verb that needs neither (state unlock) works
// on a stack whose config does not load.
type Op struct {
	// Ctx is the command's context, which the first interrupt cancels.
	Ctx context.Context
	// St is the opened stack.
	St *engine.Stack
	// Args are the verb's arguments.
	Args []string
	// Out is where the verb's text and Pulumi's progress go: stderr under
	// --json, so that stdout is only the JSON.
	Out io.Writer
	// Yes is -y/--yes: no typed confirmation.
	Yes bool
	// In is where the confirmation is typed (nil: standard input).
	In *os.File

	cfg  *config.Config
	file *stackfile.Stack // the loaded stack file cfg is from
	res  []engine.Resource
	read bool           // res was read
	outs map[string]any // the stack's outputs in the clear, read once
	obs  observations   // what the rules judge, each fetched once (observe.go)
	in   Input          // what the command line asks
	// rules are the table of the verb being run (its Within rules: Op.judgeWithin).
	rules []Rule
	// warned: the config's warnings were printed (upgrade's record runs
	// the pipeline a second time).
	warned bool
	plan   *planned // the plan stage's result; nil before it
	// The records of the verbs that are not previews.
	adopt    adoption
	teardown teardownRun
	upgrade  upgradeRun
}

// Config is the stack's config.
func (o *Op) Config() (*config.Config, error) {
	if o.cfg == nil {
		file, err := o.St.Load()
		if err != nil {
			return nil, err
		}
		o.file, o.cfg = file, file.Config
	}
	return o.cfg, nil
}

// Resources are the resources in the stack's state when first asked.
func (o *Op) Resources() ([]engine.Resource, error) {
	if !o.read {
		res, err := o.St.Resources(o.Ctx)
		if err != nil {
			return nil, err
		}
		o.res, o.read = res, true
	}
	return o.res, nil
}

// Outputs are the stack's outputs, secrets in the clear, read once.
func (o *Op) Outputs() (map[string]any, error) {
	if o.outs == nil {
		outs, err := o.St.Outputs(o.Ctx, true)
		if err != nil {
			return nil, err
		}
		o.outs = outs
	}
	return o.outs, nil
}

// Find is the resource in state of type typ named name ("" any), or nil.
func (o *Op) Find(typ, name string) (*engine.Resource, error) {
	res, err := o.Resources()
	if err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(res, func(r engine.Resource) bool { return r.Type == typ && (name == "" || r.Name() == name) }); i >= 0 {
		return &res[i], nil
	}
	return nil, nil
}

// nodeVM is the node's VM in state ("<cluster>-<node>"), or nil.
func (o *Op) nodeVM(node string) (*engine.Resource, error) {
	res, err := o.Resources()
	if err != nil {
		return nil, err
	}
	for i, r := range res {
		if gate.IsNodeVM(r.Type) && r.Name() == o.cfg.Cluster.Name+"-"+node {
			return &res[i], nil
		}
	}
	return nil, nil
}

// Confirm asks the user to type the stack name on stdin, unless --yes.
func (o *Op) Confirm(question string) error {
	if o.Yes {
		return nil
	}
	in := o.In
	if in == nil {
		in = os.Stdin
	}
	return Confirm(o.Ctx, in, o.Out, question, o.St.Name())
}

// Confirm is Milner's one confirmation: it asks the user to type the stack
// name on in; anything else declines. It refuses to ask when in is not a
// terminal (a script passes --yes), never accepts an empty word (a bare
// Enter would type it), compares the whole typed line (trimmed) with the
// name, and an interrupt while it waits declines.
func Confirm(ctx context.Context, in *os.File, out io.Writer, question, stack string) error {
	if strings.TrimSpace(stack) == "" {
		return Refused("no stack name to type as the confirmation; pass --yes to go on without the prompt; nothing was changed")
	}
	if fi, err := in.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return &Refusal{Err: ErrNoTerminal, Msg: "standard input is not a terminal, so nothing can be confirmed; pass --yes to go on without the prompt"}
	}
	if cmdutil.DisableInteractive {
		return &Refusal{Err: ErrNoTerminal, Msg: "--non-interactive: nothing is asked, so nothing can be confirmed; pass --yes to go on without the prompt"}
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
		return fmt.Errorf("%w: %w; nothing was changed", ErrNotConfirmed, ctx.Err())
	case line := <-typed:
		if line != stack {
			return &Refusal{Err: ErrNotConfirmed, Msg: fmt.Sprintf("not confirmed (typed %q, want the stack name %q); nothing was changed", line, stack)}
		}
	}
	return nil
}
