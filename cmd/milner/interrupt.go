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

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/pipeline"
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
//     released by the deferred unlock, and milner exits pipeline.ExitCancelled;
//   - the second closes terminate: an engine operation in flight
//     terminates; outside one (a guard, a download, a prompt that did not
//     stop at the first), nothing would listen, so milner exits at once
//     (pipeline.ExitCancelled). Its own lock goes with the process (flock, the
//     advisory lock's session).
type interrupt struct {
	ctx       context.Context
	terminate chan struct{}
	stop      func()
	got       atomic.Int32 // signals received
	ops       atomic.Int32 // engine operations in flight (Operation)
	exit      func(code int)
}

var _ engine.Interrupts = (*interrupt)(nil)

// Terminate is closed by the second signal.
func (in *interrupt) Terminate() <-chan struct{} { return in.terminate }

// Operation marks an engine operation in flight until done.
func (in *interrupt) Operation() (done func()) {
	in.ops.Add(1)
	return sync.OnceFunc(func() { in.ops.Add(-1) })
}

// watchInterrupts starts the handling; stop ends it. exit ends the process
// on a second signal outside an engine operation.
func watchInterrupts(parent context.Context, stderr io.Writer, exit func(code int)) *interrupt {
	ctx, cancel := context.WithCancel(parent)
	in := &interrupt{ctx: ctx, terminate: make(chan struct{}), exit: exit}
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
					close(in.terminate)
					if in.ops.Load() == 0 {
						_, _ = fmt.Fprintf(stderr, "milner: %v again: stopping now (no engine operation is running)\n", sig)
						in.exit(pipeline.ExitCancelled)
						continue
					}
					_, _ = fmt.Fprintf(stderr, "milner: %v again: terminating\n", sig)
				}
			}
		}
	}()
	return in
}

// interrupted reports whether a signal was received.
func (in *interrupt) interrupted() bool { return in.got.Load() > 0 }

// interruptsOf is the command's signal handling (nil outside run).
func interruptsOf(ctx context.Context) engine.Interrupts {
	if in, ok := ctx.Value(interruptKey{}).(*interrupt); ok {
		return in
	}
	return nil
}

type interruptKey struct{}
