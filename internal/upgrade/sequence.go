package upgrade

import (
	"context"
	"fmt"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A node below v1.13 upgrades through MachineService.Upgrade, which
// answers once the installer is pulled and then runs the upgrade sequence
// on the node: drain, stop, install, reboot (talos v1.13.9
// v1alpha1_sequencer.go Upgrade; v1alpha1_server.go Upgrade runs it after
// answering). A phase that fails ends the sequence there: the node keeps
// running its version, is not rebooted, and Talos says why only in the
// node's events, as a SequenceEvent with an error (v1alpha1_controller.go
// Run: "sequence failed: error running phase N in upgrade sequence: ...").
// `talosctl upgrade --wait` watches those events under the call's actor ID
// and stops at such an error (cmd/talosctl/pkg/talos/action/node.go
// handleEvent: "sequence error: ..."); sequenceWatch does the same, so a
// failed upgrade stops the run at once instead of after the reboot wait.
//
// A drain a PodDisruptionBudget blocks is not such a failure: Talos' drain
// (pkg/kubernetes/kubernetes.go Drain, v1.11.5 to v1.13.9) asks again
// every 5 s for up to DrainTimeout (5 minutes), then logs the eviction as
// a WARNING in machined's log and goes on: the node upgrades and reboots
// with the pod still on it. The drain's phase shows here as its progress.

// sequenceWatch follows one node's upgrade sequence by its actor ID.
type sequenceWatch struct {
	// ctx is cancelled once the sequence failed (or the watch is closed).
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	err    error
}

// watchSequence starts watching node n's events of the sequence actor
// started, writing its phases to o.Out. Every event of the boot is asked
// for (tail -1), so nothing published before the watch began is missed.
// The watch ends without an error when the node goes down (its reboot)
// or cannot be watched; the reboot wait decides then.
func (c *Cluster) watchSequence(ctx context.Context, n Node, actor string, o Options, what string) *sequenceWatch {
	w := &sequenceWatch{}
	w.ctx, w.cancel = context.WithCancel(ctx)
	ch := make(chan client.EventResult)
	if err := c.clients[n.Name].EventsWatchV2(w.ctx, ch, client.WithTailEvents(-1), client.WithActorID(actor)); err != nil {
		// Unimplemented: no events API; Unavailable: the node is already
		// going down for its reboot. Either way the reboot wait decides.
		if c := status.Code(err); c != codes.Unimplemented && c != codes.Unavailable {
			_, _ = fmt.Fprintf(o.Out, "%s: cannot watch the node's events (%v); waiting for the reboot\n", what, err)
		}
		return w
	}
	go func() {
		for {
			var r client.EventResult
			select {
			case <-w.ctx.Done():
				return
			case r = <-ch:
			}
			if r.Error != nil {
				return
			}
			switch e := r.Event.Payload.(type) {
			case *machine.PhaseEvent:
				_, _ = fmt.Fprintf(o.Out, "%s: Talos upgrade sequence: phase %s %s\n", what, e.GetPhase(), e.GetAction())
			case *machine.SequenceEvent:
				if msg := e.GetError().GetMessage(); msg != "" {
					w.mu.Lock()
					w.err = fmt.Errorf("the node's %s sequence failed; it was not rebooted and still runs its version (Talos' event: %s)", e.GetSequence(), msg)
					w.mu.Unlock()
					w.cancel()
					return
				}
			}
		}
	}()
	return w
}

// failed is the sequence's failure, if it failed.
func (w *sequenceWatch) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// close ends the watch.
func (w *sequenceWatch) close() { w.cancel() }
