package clusterapi

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
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

// LoseEtcd stops etcd and deletes its data: the control planes' etcd,
// which this one stands in for, lost; kube-apiserver, which cannot run
// without it, stops too.
func (a *API) LoseEtcd() error {
	a.stop("kube-apiserver")
	a.stop("etcd")
	return os.RemoveAll(filepath.Join(a.dir, "etcd"))
}

// RestoreEtcd is what a control plane's etcd service does with a snapshot
// a Bootstrap with RecoverEtcd hands it (talos v1.13.9
// internal/app/machined/pkg/system/services/etcd.go recoverFromSnapshot):
// etcdutl's Restore into the empty data directory as this member alone,
// no revision bump; then etcd runs from it and kube-apiserver starts
// again (a talosapi.RecoverSink). It returns once /readyz answers.
func (a *API) RestoreEtcd(snapshot []byte) error {
	file := filepath.Join(a.dir, "etcd.snapshot")
	if err := os.WriteFile(file, snapshot, 0o600); err != nil {
		return err
	}
	defer func() { _ = os.Remove(file) }()
	if err := etcdsnapshot.NewV3(zap.NewNop()).Restore(etcdsnapshot.RestoreConfig{
		SnapshotPath: file, Name: "default", OutputDataDir: filepath.Join(a.dir, "etcd"),
		PeerURLs: []string{peerURL}, InitialCluster: "default=" + peerURL,
	}); err != nil {
		return fmt.Errorf("error recovering from the snapshot: %w", err)
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if err := a.daemon(name, a.args[name]...); err != nil {
			return err
		}
	}
	return a.ready()
}
