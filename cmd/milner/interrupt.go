package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// interruptSignals are the signals that interrupt a command: SIGINT and
// SIGTERM as for the Pulumi CLI, and SIGHUP (the terminal closed, an ssh
// session dropped), which would otherwise kill milner at once, mid-step,
// with its locks held and the state unsaved.
var interruptSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// interrupt is the process's handling of SIGINT, SIGTERM and SIGHUP, one level per
// signal, as the Pulumi CLI's (pkg/v3 backend.CancellationScopes):
//   - the first cancels the command's context: an engine operation is asked
//     to cancel gracefully (engine.Stack runs it so that the steps in flight
//     finish, the state is saved and the backend's lock row is deleted),
//     work between operations (guards, prompts) stops, Milner's lock is
//     released by the deferred unlock, and milner exits exitInterrupted;
//   - the second closes terminate: the engine terminates.
type interrupt struct {
	ctx       context.Context
	terminate chan struct{}
	stop      func()
	got       atomic.Int32 // signals received
}

// watchInterrupts starts the handling; stop ends it.
func watchInterrupts(parent context.Context, stderr io.Writer) *interrupt {
	ctx, cancel := context.WithCancel(parent)
	in := &interrupt{ctx: ctx, terminate: make(chan struct{})}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, interruptSignals...)
	done := make(chan struct{})
	in.stop = sync.OnceFunc(func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	})
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				switch in.got.Add(1) {
				case 1:
					_, _ = fmt.Fprintf(stderr, "milner: %v: cancelling gracefully (the steps in flight finish, the state is saved, every lock is released); send it again to terminate\n", sig)
					cancel()
				case 2:
					_, _ = fmt.Fprintf(stderr, "milner: %v again: terminating\n", sig)
					close(in.terminate)
				}
			}
		}
	}()
	return in
}

// interrupted reports whether a signal was received.
func (in *interrupt) interrupted() bool { return in.got.Load() > 0 }

// terminateOf is the channel closed on the second signal (nil outside run).
func terminateOf(ctx context.Context) <-chan struct{} {
	if in, ok := ctx.Value(interruptKey{}).(*interrupt); ok {
		return in.terminate
	}
	return nil
}

type interruptKey struct{}
