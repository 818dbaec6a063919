package clusterapi

import (
	"context"
	"io"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdURL and peerURL are where Start's etcd serves its clients and peers.
const etcdURL, peerURL = "http://127.0.0.1:22379", "http://127.0.0.1:22380"

// EtcdSnapshot streams a snapshot of the scenario's etcd as etcd's
// Maintenance.Snapshot serves it (the bbolt database, then its sha256):
// what a Talos control plane's EtcdSnapshot forwards. A scenario hands it
// to its doubles: cluster.SetEtcdSnapshotSource(api.EtcdSnapshot).
func (a *API) EtcdSnapshot(ctx context.Context) (io.ReadCloser, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	rd, err := c.Snapshot(ctx)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &closeBoth{ReadCloser: rd, c: c}, nil
}

// closeBoth closes the stream, then its client.
type closeBoth struct {
	io.ReadCloser
	c *clientv3.Client
}

func (r *closeBoth) Close() error {
	err := r.ReadCloser.Close()
	_ = r.c.Close()
	return err
}
