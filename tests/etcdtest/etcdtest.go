// Package etcdtest runs a real etcd in process (go.etcd.io/etcd/server/v3
// embed, the server Talos runs, v3.6) for tests that need a real etcd
// snapshot: its bbolt database and the sha256 trailer etcd's
// Maintenance.Snapshot appends. Only tests import it.
package etcdtest

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is one etcd member on loopback (ports the kernel picks) and a
// client of it.
type Etcd struct {
	e *embed.Etcd
	// Client is an etcd client of it.
	Client *clientv3.Client
}

// Start starts a one-member etcd in t's temporary directory, stopped at
// the end of the test; it is ready (has a leader) when Start returns.
func Start(t testing.TB) *Etcd {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "panic" // its errors as it closes are noise; Start fails on its own
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{local}, []url.URL{local}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{local}, []url.URL{local}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd: not ready after 30s")
	}
	// A client over loopback: v3client's in-process adapter (grpcproxy
	// adapter.chanStream) may cancel a snapshot stream before its last
	// messages are read.
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &Etcd{e: e, Client: c}
}

// Put writes n keys under prefix and returns etcd's revision after them.
func (e *Etcd) Put(ctx context.Context, prefix string, n int) (int64, error) {
	var rev int64
	for i := range n {
		r, err := e.Client.Put(ctx, fmt.Sprintf("%s/%d", prefix, i), fmt.Sprintf("value %d", i))
		if err != nil {
			return 0, err
		}
		rev = r.Header.Revision
	}
	return rev, nil
}

// Snapshot streams a snapshot of the member as etcd's Maintenance.Snapshot
// serves it (the database, then its sha256): the bytes Talos' EtcdSnapshot
// forwards.
func (e *Etcd) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	return e.Client.Snapshot(ctx)
}
