package engine

import (
	"context"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	pkgengine "github.com/pulumi/pulumi/pkg/v3/engine"
	"github.com/pulumi/pulumi/pkg/v3/util/cancel"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
)

// Interrupts, as the engine of pkg/v3 v3.276.0 understands them
// (util/cancel/context.go): an engine operation has two contexts, cancel
// (finish the steps in flight, start no new one, persist state, return) and
// terminate (stop now). Cancelling the context an operation is given is
// terminate, and the DIY backend uses that same context for its state
// persister (backend/diy/snapshot.go), its lock (backend/diy/backend.go:
// Lock/Unlock) and its history and backups, which all refuse to run once it
// is cancelled: the engine's own CLI keeps it alive and cancels through
// backend.CancellationScopes instead.
//
// Milner does the same with its own scope source, driven by the caller's
// context rather than by signals it would catch a second time:
//   - the caller's ctx cancelled → the engine is asked to cancel gracefully;
//   - Options.Interrupts' Terminate closed → the engine terminates;
//   - the backend (persister, lock row, history) runs on
//     context.WithoutCancel(ctx), which neither cancels.

// Interrupts is the caller's handling of signals as an engine operation
// needs it.
type Interrupts interface {
	// Terminate is closed by the signal that terminates an operation.
	Terminate() <-chan struct{}
	// Operation marks an engine operation in flight until done is called:
	// outside one, no engine listens to Terminate, and the caller acts on
	// that signal itself.
	Operation() (done func())
}

// scopes is the backend.CancellationScopeSource of one operation.
type scopes struct {
	graceful context.Context
	in       Interrupts // nil: never terminated
}

var _ backend.CancellationScopeSource = scopes{}

// scope is one engine run's cancellation scope.
type scope struct {
	ctx       *cancel.Context
	done      chan struct{}
	left      chan struct{}
	operation func() // ends the caller's mark of the operation
}

func (s *scope) Context() *cancel.Context { return s.ctx }

// Close stops the watcher before the backend closes the events channel.
func (s *scope) Close() {
	close(s.done)
	<-s.left
	s.operation()
}

// NewScope ties the engine's cancel and terminate to the caller's context
// and Terminate, and marks the operation in flight until Close. The engine's events carry the engine's own note of it, as
// the CLI's scope does.
func (src scopes) NewScope(base context.Context, events chan<- pkgengine.Event, _ bool) backend.CancellationScope {
	c, source := cancel.NewContext(base)
	var terminate <-chan struct{}
	s := &scope{ctx: c, done: make(chan struct{}), left: make(chan struct{}), operation: func() {}}
	if src.in != nil {
		terminate, s.operation = src.in.Terminate(), src.in.Operation()
	}
	say := func(msg string) {
		select {
		case events <- pkgengine.NewEvent(pkgengine.StdoutEventPayload{Message: msg, Color: colors.Never}):
		case <-s.done:
		}
	}
	go func() {
		defer close(s.left)
		select {
		case <-src.graceful.Done():
			source.Cancel()
			say("milner: interrupted; the engine finishes the steps in flight, saves the state and releases the locks\n")
		case <-s.done:
			return
		}
		select {
		case <-terminate:
			source.Terminate()
			say("milner: interrupted again; the engine terminates\n")
		case <-s.done:
		}
	}()
	return s
}

// engineContext is the context an engine operation runs on: not cancelled
// by the caller's ctx (the scope above carries that to the engine), so that
// the backend persists the state and deletes its lock after an interrupt.
func engineContext(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
