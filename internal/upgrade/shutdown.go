package upgrade

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
)

// Graceful replace: before the engine deletes the VM of a node named with
// `milner up --replace`, the node is asked to shut down through the Talos
// API and its VM is given a bounded time to stop.
//
// Why it matters: the providers power a running VM off. The libvirt
// provider deletes a domain with DomainDestroy (a hard power-off) only when
// it is running or paused (terraform-provider-libvirt v0.8.3
// libvirt/resource_libvirt_domain.go, resourceLibvirtDomainDelete: "if state
// == DomainRunning || state == DomainPaused { DomainDestroy }"); bpg's
// provider stops or shuts down a VM only when its status is not "stopped"
// (proxmoxtf/resource/vm/vm.go, vmDelete), and without a guest agent (Milner
// disables it) that is an ACPI request or a hard stop. A VM that has
// already shut itself down is undefined as it is.
//
// What Talos does on Shutdown (talos v1.11.5 internal/app/machined/pkg/
// runtime/v1alpha1/v1alpha1_sequencer.go, Sequencer.Shutdown): the phases
// "drain" (CordonAndDrainNode, unless force or the kubelet skips node
// registration), "cleanup" (StopAllPods), then every service stopped and
// the machine powered off. The API answers at once and runs that sequence
// in the background (internal/server/v1alpha1/v1alpha1_server.go,
// Server.Shutdown), so the wait is on the VM, not on the call. Shutdown
// does not leave etcd: a control plane replaced with its OS disk keeps its
// member and its data (EPHEMERAL is on the OS disk).

// StoppedFunc reports whether a node's VM has stopped (libvirt: the domain
// is shut off; Proxmox: the VM's status is "stopped").
type StoppedFunc func(ctx context.Context, node string) (bool, error)

// ShutdownOutcome is what became of one node's graceful shutdown.
type ShutdownOutcome struct {
	// Node is the node.
	Node string
	// Answered reports that the node accepted the Shutdown call.
	Answered bool
	// Stopped reports that its VM stopped within the wait.
	Stopped bool
	// Err says why it did not answer or did not stop (nil when it stopped).
	Err error
}

// shutdownCallTimeout bounds the Shutdown call itself: a dead node costs
// this much before the replace goes on.
const shutdownCallTimeout = 15 * time.Second

// ShutdownForReplace asks each named node to shut down (force=false:
// Talos cordons and drains it first) and waits up to timeout for its VM to
// stop. A node that does not answer, or whose VM does not stop in time, is
// reported and the replace goes on (the recovery case: the node is dead,
// and the provider powers the VM off as before). Only an interrupt stops
// it: the error is then the context's, and nothing was deleted.
func (c *Cluster) ShutdownForReplace(ctx context.Context, nodes []string, stopped StoppedFunc, timeout time.Duration, o Options) ([]ShutdownOutcome, error) {
	var out []ShutdownOutcome
	for _, name := range nodes {
		r := c.shutdown(ctx, name, stopped, timeout, o)
		if cerr := ctx.Err(); cerr != nil {
			return out, cerr
		}
		switch {
		case r.Stopped:
			_, _ = fmt.Fprintf(o.Out, "milner up: %s: its VM has stopped; the replace deletes it\n", r.Node)
		case r.Answered:
			_, _ = fmt.Fprintf(o.Out, "milner up: %s: its VM did not stop within %s (%v); the replace goes on and the provider powers it off\n", r.Node, timeout, r.Err)
		default:
			_, _ = fmt.Fprintf(o.Out, "milner up: %s: did not answer the Talos API (%v); treated as dead, the replace goes on\n", r.Node, r.Err)
		}
		out = append(out, r)
	}
	return out, nil
}

// shutdown asks one node to shut down and waits for its VM to stop.
func (c *Cluster) shutdown(ctx context.Context, name string, stopped StoppedFunc, timeout time.Duration, o Options) ShutdownOutcome {
	r := ShutdownOutcome{Node: name}
	cl, ok := c.clients[name]
	if !ok {
		r.Err = errors.New("not a declared node")
		return r
	}
	callCtx, cancel := context.WithTimeout(ctx, shutdownCallTimeout)
	defer cancel()
	if err := cl.Shutdown(callCtx, client.WithShutdownForce(false)); err != nil {
		r.Err = fmt.Errorf("talos shutdown: %w", err)
		return r
	}
	r.Answered = true
	_, _ = fmt.Fprintf(o.Out, "milner up: %s: Talos shuts down (cordon, drain, stop services); waiting up to %s for its VM to stop\n", name, timeout)
	r.Err = waitFor(ctx, o, timeout, func() error {
		done, err := stopped(ctx, name)
		switch {
		case err != nil:
			return err
		case !done:
			return errors.New("its VM still runs")
		}
		return nil
	})
	r.Stopped = r.Err == nil
	return r
}
