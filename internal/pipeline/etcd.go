package pipeline

import (
	"errors"
	"fmt"

	"github.com/milner/milner/internal/etcdbackup"
	"github.com/milner/milner/internal/secretsbundle"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/stacks/config"
)

// EtcdSnapshotInput is `milner etcd snapshot`'s flags.
type EtcdSnapshotInput struct {
	// Out is --out: the file, or a directory for the default name.
	Out string
	// Force is --force: replace an existing file.
	Force bool
	// Recipients are --recipient, RecipientsFiles --recipients-file.
	Recipients, RecipientsFiles []string
	// Talosconfig is --talosconfig ("": the state's).
	Talosconfig string
}

// EtcdSnapshot is `milner etcd snapshot`: the flags and the stack config
// checked first, every problem at once; then the control planes dialled
// with the state's talosconfig, a snapshot streamed from one whose etcd is
// healthy, verified, and written age-encrypted (etcdbackup.Take).
func EtcdSnapshot(o *Op, in EtcdSnapshotInput) (*etcdbackup.Result, error) {
	rs, rerr := secretsbundle.Recipients(in.Recipients, in.RecipientsFiles)
	if rerr != nil {
		rerr = fmt.Errorf("--recipient/--recipients-file: %w", rerr)
	}
	dir, file, terr := etcdbackup.Target(in.Out, in.Force)
	if err := errors.Join(rerr, terr); err != nil {
		return nil, err
	}
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	if !cfg.Declares(config.LayerTalos) {
		return nil, Refused("stack %q declares no Talos layer (milner:startAt, milner:stopAfter), so it runs no etcd; nothing was written", o.St.Name())
	}
	tc, err := o.talosconfig(in.Talosconfig)
	if err != nil {
		return nil, fmt.Errorf("%w (`milner up` writes it to the state; or pass --talosconfig)", err)
	}
	cl, err := upgrade.Connect(o.Ctx, tc, upgrade.FromConfig(cfg))
	if err != nil {
		return nil, err
	}
	defer func() { _ = cl.Close() }()
	return etcdbackup.Take(o.Ctx, cl, etcdbackup.Meta{Cluster: cfg.Cluster.Name, Stack: o.St.Name()}, rs, dir, file, in.Force)
}
