package etcdbackup_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	mtype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/internal/etcdbackup"
	"github.com/milner/milner/internal/upgrade"
	"github.com/milner/milner/tests/etcdtest"
	"github.com/milner/milner/tests/talosapi"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// key is an age identity in a key file, as age-keygen writes it.
func key(t *testing.T) (*age.X25519Identity, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "key.txt")
	require.NoError(t, os.WriteFile(p, []byte(id.String()+"\n"), 0o600))
	return id, p
}

// secrets is one bundle for every test: generating one takes seconds.
var secrets = sync.OnceValues(func() (*talosapi.Secrets, error) { return talosapi.NewSecrets("milner", "https://127.0.0.1:1") })

// cluster is the double's nodes, in this order, each booted with its
// role's config; the first control plane bootstraps etcd. It returns the
// upgrade.Cluster milner dials them with.
func cluster(t *testing.T, src talosapi.SnapshotSource, nodes ...upgrade.Node) (*talosapi.Cluster, *upgrade.Cluster) {
	t.Helper()
	return clusterOf(t, src, true, nodes...)
}

// clusterOf is cluster, its etcd bootstrapped or not (every control
// plane's etcd data lost, as after a wipe of their EPHEMERAL).
func clusterOf(t *testing.T, src talosapi.SnapshotSource, bootstrap bool, nodes ...upgrade.Node) (*talosapi.Cluster, *upgrade.Cluster) {
	t.Helper()
	s, err := secrets()
	require.NoError(t, err)
	cp, err := s.Config(mtype.TypeControlPlane, "1.34.1")
	require.NoError(t, err)
	w, err := s.Config(mtype.TypeWorker, "1.34.1")
	require.NoError(t, err)
	tc, err := s.Talosconfig()
	require.NoError(t, err)
	c := talosapi.NewCluster()
	t.Cleanup(func() { _ = c.Close() })
	c.SetEtcdSnapshotSource(src)
	var d upgrade.Declared
	bootstrapped := !bootstrap
	for i, n := range nodes {
		cfg := w
		if n.Role == vocab.RoleControlPlane {
			cfg = cp
		}
		dn, err := c.AddNode(n.Name, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 46, byte(10 + i)}), 0), talosapi.WithPlatformConfig(cfg))
		require.NoError(t, err)
		if n.Role == vocab.RoleControlPlane && !bootstrapped {
			require.NoError(t, dn.BootstrapEtcd())
			bootstrapped = true
		}
		n.Endpoint = dn.Endpoint()
		d.Nodes = append(d.Nodes, n)
	}
	uc, err := upgrade.Connect(context.Background(), tc, d)
	require.NoError(t, err)
	t.Cleanup(func() { _ = uc.Close() })
	return c, uc
}

func cpNode(name string) upgrade.Node { return upgrade.Node{Name: name, Role: vocab.RoleControlPlane} }
func wNode(name string) upgrade.Node  { return upgrade.Node{Name: name, Role: vocab.RoleWorker} }

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// The verb's path against the double: a worker and a control plane whose
// etcd is down are passed over, the healthy control plane streams a real
// etcd's snapshot, and the file decrypts to that snapshot, at the revision
// the etcd had, with the metadata recorded.
func TestTakeFromAHealthyControlPlane(t *testing.T) {
	c := ctx(t)
	e := etcdtest.Start(t)
	rev, err := e.Put(c, "/registry/configmaps/default/cm", 25)
	require.NoError(t, err)
	d, uc := cluster(t, e.Snapshot, wNode("w-1"), cpNode("cp-1"), cpNode("cp-2"))
	d.Nodes()[1].SetEtcdRunning(false)
	id, keyFile := key(t)
	dir := t.TempDir()

	res, err := etcdbackup.Take(c, uc, etcdbackup.Meta{Cluster: "milner", Stack: "dev"}, []age.Recipient{id.Recipient()}, dir, "", false)
	require.NoError(t, err)
	assert.Equal(t, "cp-2", res.Node, "cp-1's etcd is down")
	require.Len(t, res.Skipped, 1)
	assert.Contains(t, res.Skipped[0], "cp-1: etcd status:")
	assert.Equal(t, rev, res.Revision)
	assert.GreaterOrEqual(t, res.TotalKeys, 25)
	assert.Equal(t, filepath.Join(dir, res.FileName()), res.Path)
	assert.Regexp(t, `^milner-etcd-\d{8}T\d{6}Z-rev\d+\.snapshot\.age$`, filepath.Base(res.Path))
	assert.Equal(t, []string{filepath.Base(res.Path)}, entries(t, dir), "the file alone: no temporary file left")
	fi, err := os.Stat(res.Path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	assert.Len(t, d.Journal().Calls("EtcdSnapshot"), 1)

	raw, err := os.ReadFile(res.Path)
	require.NoError(t, err)
	assert.False(t, bytes.Contains(raw, []byte("/registry/configmaps")), "never the clear snapshot on disk")

	m, clear, err := etcdbackup.Open(res.Path, keyFile)
	require.NoError(t, err)
	defer func() { _ = clear.Close() }()
	assert.Equal(t, res.Meta, m)
	assert.Equal(t, rev, clear.Status.Revision)

	// Without Milner: age, then tar, gives etcd's snapshot back.
	plain, err := age.Decrypt(bytes.NewReader(raw), id)
	require.NoError(t, err)
	tr := tar.NewReader(plain)
	var names []string
	var db []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
		if h.Name == "db.snapshot" {
			db, err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
	assert.Equal(t, []string{"meta.json", "db.snapshot"}, names)
	require.Len(t, db, int(res.Bytes))
	sum := sha256.Sum256(db[:len(db)-sha256.Size])
	assert.Equal(t, sum[:], db[len(db)-sha256.Size:], "etcd's sha256 trailer, kept")
}

// No control plane with a healthy etcd: nothing is streamed or written.
func TestRefusedWithoutAHealthyEtcd(t *testing.T) {
	c := ctx(t)
	e := etcdtest.Start(t)
	d, uc := cluster(t, e.Snapshot, cpNode("cp-1"), wNode("w-1"))
	d.Nodes()[0].SetEtcdRunning(false)
	id, _ := key(t)
	dir := t.TempDir()

	_, err := etcdbackup.Take(c, uc, etcdbackup.Meta{Cluster: "milner"}, []age.Recipient{id.Recipient()}, dir, "", false)
	require.ErrorIs(t, err, upgrade.ErrNoHealthyEtcd)
	assert.ErrorContains(t, err, "cp-1: etcd status:")
	assert.Empty(t, entries(t, dir))
	assert.Empty(t, d.Journal().Calls("EtcdSnapshot"))
}

// corrupt streams src with f applied to its bytes.
func corrupt(src talosapi.SnapshotSource, f func([]byte) []byte) talosapi.SnapshotSource {
	return func(ctx context.Context) (io.ReadCloser, error) {
		r, err := src(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = r.Close() }()
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(f(b))), nil
	}
}

// A stream whose sha256 trailer does not match its database, or that has
// none, is refused, and no file is left behind.
func TestCorruptStreamRefused(t *testing.T) {
	e := etcdtest.Start(t)
	_, err := e.Put(ctx(t), "/k", 5)
	require.NoError(t, err)
	for name, f := range map[string]func([]byte) []byte{
		"trailer mismatch": func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b },
		"no trailer":       func(b []byte) []byte { return b[:len(b)-sha256.Size] },
	} {
		t.Run(name, func(t *testing.T) {
			_, uc := cluster(t, corrupt(e.Snapshot, f), cpNode("cp-1"))
			id, _ := key(t)
			dir := t.TempDir()
			_, err := etcdbackup.Take(ctx(t), uc, etcdbackup.Meta{Cluster: "milner"}, []age.Recipient{id.Recipient()}, dir, "", false)
			require.ErrorIs(t, err, etcdbackup.ErrCorrupt)
			assert.ErrorContains(t, err, "etcd snapshot from cp-1")
			assert.Empty(t, entries(t, dir))
		})
	}
}

// An existing file is never overwritten without force: refused when the
// flags are checked (Target) and again as the file is linked in (Seal).
func TestExistingFileRefused(t *testing.T) {
	e := etcdtest.Start(t)
	clear := loaded(t, e)
	id, keyFile := key(t)
	rs := []age.Recipient{id.Recipient()}
	dir := t.TempDir()
	out := filepath.Join(dir, "backup.age")
	require.NoError(t, os.WriteFile(out, []byte("keep me"), 0o600))

	_, _, err := etcdbackup.Target(out, false)
	assert.ErrorContains(t, err, "--out "+out+" exists")
	m := clear.Meta(etcdbackup.Meta{Cluster: "milner", TakenAt: time.Now().UTC()})
	_, err = clear.Seal(m, rs, dir, out, false)
	assert.ErrorContains(t, err, "exists")
	kept, _ := os.ReadFile(out)
	assert.Equal(t, "keep me", string(kept))
	assert.Equal(t, []string{"backup.age"}, entries(t, dir))

	d, f, err := etcdbackup.Target(out, true)
	require.NoError(t, err)
	_, err = clear.Seal(m, rs, d, f, true)
	require.NoError(t, err)
	got, c2, err := etcdbackup.Open(out, keyFile)
	require.NoError(t, err)
	_ = c2.Close()
	assert.Equal(t, m, got)

	_, _, err = etcdbackup.Target(filepath.Join(dir, "no", "such"), false)
	assert.ErrorContains(t, err, "does not exist")
}

// Open refuses a file whose snapshot is not the one its meta.json
// recorded, and a key that is not a recipient's.
func TestOpenChecks(t *testing.T) {
	e := etcdtest.Start(t)
	clear := loaded(t, e)
	id, keyFile := key(t)
	dir := t.TempDir()
	m := clear.Meta(etcdbackup.Meta{Cluster: "milner", TakenAt: time.Now().UTC()})
	m.Revision++
	p, err := clear.Seal(m, []age.Recipient{id.Recipient()}, dir, "", false)
	require.NoError(t, err)
	_, _, err = etcdbackup.Open(p, keyFile)
	require.ErrorIs(t, err, etcdbackup.ErrCorrupt)
	assert.ErrorContains(t, err, "meta.json recorded revision")

	_, other := key(t)
	_, _, err = etcdbackup.Open(p, other)
	assert.ErrorContains(t, err, "did not match any of the recipients")
	assert.True(t, strings.HasPrefix(filepath.Base(p), "milner-etcd-"))
}

// loaded is a snapshot of e, loaded and verified as the verb loads it,
// closed when the test ends.
func loaded(t *testing.T, e *etcdtest.Etcd) *etcdbackup.Clear {
	t.Helper()
	rd, err := e.Snapshot(ctx(t))
	require.NoError(t, err)
	clear, err := etcdbackup.Load(rd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = clear.Close() })
	return clear
}
