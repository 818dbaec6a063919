package etcdbackup

import (
	"context"
	"fmt"
	"time"

	"filippo.io/age"

	"github.com/milner/milner/internal/upgrade"
)

// Source streams an etcd snapshot from a healthy control plane:
// upgrade.Cluster.
type Source interface {
	EtcdSnapshot(ctx context.Context) (*upgrade.Snapshot, error)
}

// Result is one snapshot taken: what `milner etcd snapshot --json` prints.
type Result struct {
	Meta
	// Path is the file written.
	Path string `json:"path"`
	// Skipped are the control planes asked first whose etcd did not
	// answer, each with why.
	Skipped []string `json:"skipped,omitempty"`
}

// Take streams a snapshot from src into memory, verifies it (Load), and
// seals it for rs (Clear.Seal) at dir/file (Target), recording m's
// cluster and stack with the node it came from, the time the stream ended
// and what the snapshot says of itself. A snapshot that fails its checks
// writes nothing.
func Take(ctx context.Context, src Source, m Meta, rs []age.Recipient, dir, file string, force bool) (*Result, error) {
	s, err := src.EtcdSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Close() }()
	c, err := Load(s)
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot from %s: %w; nothing was written", s.Node, err)
	}
	defer func() { _ = c.Close() }()
	m.Node, m.TakenAt = s.Node, time.Now().UTC().Truncate(time.Second)
	m = c.Meta(m)
	path, err := c.Seal(m, rs, dir, file, force)
	if err != nil {
		return nil, err
	}
	return &Result{Meta: m, Path: path, Skipped: s.Skipped}, nil
}
