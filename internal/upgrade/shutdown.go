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

// shutdownCallTimeout bounds the Shutdown call itself: a dead node costs
// this much before the replace goes on.
const shutdownCallTimeout = 15 * time.Second

// ShutdownForReplace asks each named node to shut down (force=false:
// Talos cordons and drains it first) and waits up to timeout for its VM to
// stop. A node that does not answer, or whose VM does not stop in time, is
// reported and the replace goes on (the recovery case: the node is dead,
// and the provider powers the VM off as before). Only an interrupt stops
// it: the error is then the context's, and nothing was deleted.
func (c *Cluster) ShutdownForReplace(ctx context.Context, nodes []string, stopped StoppedFunc, timeout time.Duration, o Options) error {
	for _, name := range nodes {
		answered, err := c.shutdown(ctx, name, stopped, timeout, o)
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		switch {
		case err == nil:
			_, _ = fmt.Fprintf(o.Out, "milner up: %s: its VM has stopped; the replace deletes it\n", name)
		case answered:
			_, _ = fmt.Fprintf(o.Out, "milner up: %s: its VM did not stop within %s (%v); the replace goes on and the provider powers it off\n", name, timeout, err)
		default:
			_, _ = fmt.Fprintf(o.Out, "milner up: %s: did not answer the Talos API (%v); treated as dead, the replace goes on\n", name, err)
		}
	}
	return nil
}

// shutdown asks one node to shut down and waits for its VM to stop: nil
// when it stopped; answered when the node took the Shutdown call.
func (c *Cluster) shutdown(ctx context.Context, name string, stopped StoppedFunc, timeout time.Duration, o Options) (answered bool, err error) {
	cl, ok := c.clients[name]
	if !ok {
		return false, errors.New("not a declared node")
	}
	callCtx, cancel := context.WithTimeout(ctx, shutdownCallTimeout)
	defer cancel()
	if err := cl.Shutdown(callCtx, client.WithShutdownForce(false)); err != nil {
		return false, fmt.Errorf("talos shutdown: %w", err)
	}
	_, _ = fmt.Fprintf(o.Out, "milner up: %s: Talos shuts down (cordon, drain, stop services); waiting up to %s for its VM to stop\n", name, timeout)
	return true, waitFor(ctx, o, timeout, func() error {
		done, err := stopped(ctx, name)
		switch {
		case err != nil:
			return err
		case !done:
			return errors.New("its VM still runs")
		}
		return nil
	})
}
