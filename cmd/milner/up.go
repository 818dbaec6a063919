package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"

	"github.com/milner/milner/internal/engine"
)

func init() {
	register("up", "apply the stack: create, update and replace until it matches the program", runUp)
}

// runUp is `milner up --stack <name>`.
func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	eo := engineFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if eo.Stack == "" {
		return errors.New("--stack is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	st, err := engine.Open(ctx, *eo)
	if err != nil {
		return err
	}
	_, err = st.Up(ctx)
	return err
}
