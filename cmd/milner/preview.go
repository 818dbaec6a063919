package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/milner/milner/internal/engine"
)

func init() {
	register("preview", "show what `up` would change (Pulumi engine, local file backend)", runPreview)
}

// runPreview is `milner preview --stack <name> [--refresh]`.
func runPreview(args []string) error {
	fs := flag.NewFlagSet("preview", flag.ContinueOnError)
	eo := engineFlags(fs)
	refresh := fs.Bool("refresh", false, "read every resource back from its provider first")
	if err := parseFlags(fs, args, "stack"); err != nil {
		return err
	}
	ctx, stop, st, err := openStack(eo)
	if err != nil {
		return err
	}
	defer stop()
	_, err = st.Preview(ctx, *refresh)
	return err
}

// openStack opens the stack of eo under a context that an interrupt
// cancels; the caller defers stop.
func openStack(eo *engine.Options) (ctx context.Context, stop context.CancelFunc, st *engine.Stack, err error) {
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt)
	if st, err = engine.Open(ctx, *eo); err != nil {
		stop()
	}
	return ctx, stop, st, err
}

// engineFlags declares the flags every engine verb shares and returns the
// options they fill.
func engineFlags(fs *flag.FlagSet) *engine.Options {
	o := &engine.Options{}
	fs.StringVar(&o.Stack, "stack", "", "stack name; its config is Pulumi.<stack>.yaml in the repo (required)")
	fs.StringVar(&o.Repo, "repo", ".", "repository root (holds .tools/bin and the stack files)")
	fs.StringVar(&o.StateDir, "state", "", fmt.Sprintf("file backend directory (default <repo>/%s); passphrase from $%s", engine.DefaultStateDir, engine.PassphraseEnv))
	return o
}
