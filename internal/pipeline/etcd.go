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

// EtcdRestoreInput is `milner etcd restore`'s flags.
type EtcdRestoreInput struct {
	// From is --from, Identity --identity: the snapshot file and its key.
	From, Identity string
	// Node is --node: the control plane that bootstraps from it.
	Node string
	// Talosconfig is --talosconfig ("": the state's).
	Talosconfig string
}

// EtcdRestore is `milner etcd restore`: the file decrypted and verified
// (etcdbackup.Open) and of this stack's cluster, --node a control plane;
// refused while etcd has quorum (upgrade.ErrEtcdHasQuorum); confirmed;
// then Talos' recovery on the node (upgrade.Cluster.EtcdRestore).
func EtcdRestore(o *Op, in EtcdRestoreInput) error {
	m, clear, err := etcdbackup.Open(in.From, in.Identity)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	defer func() { _ = clear.Close() }()
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	if m.Cluster != cfg.Cluster.Name {
		return Refused("--from %s is a snapshot of cluster %q, stack %q is cluster %q (milner:cluster.name); nothing was changed", in.From, m.Cluster, o.St.Name(), cfg.Cluster.Name)
	}
	tc, err := o.talosconfig(in.Talosconfig)
	if err != nil {
		return fmt.Errorf("%w (`milner up` writes it to the state; or pass --talosconfig)", err)
	}
	cl, err := upgrade.Connect(o.Ctx, tc, upgrade.FromConfig(cfg))
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()
	_, _ = fmt.Fprint(o.Out, "milner etcd: restore ")
	m.Write(o.Out)
	err = cl.EtcdRestore(o.Ctx, in.Node, clear.Reader(), o.Out, func() error {
		return o.Confirm(fmt.Sprintf("Bootstrap etcd on %s from this snapshot? Every change after revision %d is lost.", in.Node, m.Revision))
	})
	if errors.Is(err, upgrade.ErrEtcdHasQuorum) {
		return Refused("%v", err)
	}
	return err
}
