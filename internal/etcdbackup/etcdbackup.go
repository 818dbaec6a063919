// Package etcdbackup keeps an etcd snapshot, as Talos' EtcdSnapshot
// streams it, age-encrypted at rest, and checks one read back: what
// `milner etcd snapshot` and `milner etcd inspect` are made of.
//
// The clear snapshot lives only in memory (a memfd, freed with the
// process however it exits); the file on disk is age's binary format,
// for the operator's recipients, holding a tar of two entries:
//
//	meta.json    Meta: the cluster, stack, node, UTC time, etcd revision,
//	             hash, keys, size and sha256 of the snapshot
//	db.snapshot  the snapshot as etcd streamed it (bbolt database and its
//	             sha256 trailer): what `talosctl bootstrap --recover-from`
//	             and `etcdutl snapshot restore` read
//
// so `age -d -i key F | tar x` gives the snapshot back without Milner.
package etcdbackup

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/milner/milner/internal/secretsbundle"
)

// Format is the version of the file's layout, recorded in Meta.
const Format = 1

// The tar entries, in this order.
const (
	metaEntry     = "meta.json"
	snapshotEntry = "db.snapshot"
)

// maxMeta bounds meta.json as it is read back.
const maxMeta = 64 << 10

// ErrCorrupt is wrapped when a snapshot fails its checks: no sha256
// trailer, a trailer that does not match, a database bbolt cannot read, or
// a file whose snapshot differs from what its meta.json recorded.
var ErrCorrupt = errors.New("corrupt etcd snapshot")

// Meta is what a snapshot file records of its snapshot, and what --json
// prints.
type Meta struct {
	// Format is the file layout's version (Format).
	Format int `json:"format"`
	// Cluster is milner:cluster.name.
	Cluster string `json:"cluster"`
	// Stack is the Pulumi stack.
	Stack string `json:"stack"`
	// Node is the control plane the snapshot was streamed from.
	Node string `json:"node"`
	// TakenAt is when the stream ended, UTC.
	TakenAt time.Time `json:"takenAt"`
	// Revision is etcd's revision in the snapshot (etcdutl's Status).
	Revision int64 `json:"revision"`
	// Hash is etcdutl's hash of the snapshot's buckets (crc32c), as
	// `talosctl etcd snapshot` and `etcdutl snapshot status` print it.
	Hash uint32 `json:"hash"`
	// TotalKeys is the number of keys (etcdutl's Status).
	TotalKeys int `json:"totalKeys"`
	// TotalSize is the database's size (etcdutl's Status).
	TotalSize int64 `json:"totalSize"`
	// Bytes is the snapshot's size as streamed, with its trailer.
	Bytes int64 `json:"bytes"`
	// SHA256 is the snapshot's sha256 trailer, hex.
	SHA256 string `json:"sha256"`
}

// FileName is the default file name: the cluster, the UTC time and the
// revision, so a directory of snapshots sorts by time.
func (m Meta) FileName() string {
	return fmt.Sprintf("%s-etcd-%s-rev%d.snapshot.age", m.Cluster, m.TakenAt.UTC().Format("20060102T150405Z"), m.Revision)
}

// Clear is a verified snapshot in memory.
type Clear struct {
	f    *os.File
	size int64
	// Status is etcdutl's status of the snapshot.
	Status snapshot.Status
	// SHA256 is the snapshot's sha256 trailer.
	SHA256 [sha256.Size]byte
}

// Load reads an etcd snapshot stream into memory and verifies it as
// talosctl and etcdutl do: etcd's Maintenance.Snapshot appends the sha256
// of the database (etcd v3.6.16 server/etcdserver/api/v3rpc/maintenance.go,
// Snapshot), so its size is a multiple of 512 plus 32 (talosctl v1.13.9
// etcd.go: "sha256 checksum not found"; etcdutl v3.6.16
// snapshot/v3_snapshot.go hasChecksum), and that sha256 must be the
// database's (etcdutl's saveDB: "expected sha256 ..."); then etcdutl's
// Status reads the database with bbolt (its integrity check, revision,
// hash and keys).
func Load(src io.Reader) (*Clear, error) {
	fd, err := unix.MemfdCreate("milner-etcd-snapshot", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	c := &Clear{f: os.NewFile(uintptr(fd), "milner-etcd-snapshot")}
	if err := c.load(src); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Clear) load(src io.Reader) error {
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(c.f, h), src)
	if err != nil {
		return fmt.Errorf("read the etcd snapshot: %w", err)
	}
	c.size = n
	if n%512 != sha256.Size {
		return fmt.Errorf("%w: sha256 checksum not found (size %d)", ErrCorrupt, n)
	}
	// The trailer is the stream's last 32 bytes; the database is the rest.
	if _, err := c.f.ReadAt(c.SHA256[:], n-sha256.Size); err != nil {
		return err
	}
	db := sha256.New()
	if _, err := io.Copy(db, io.NewSectionReader(c.f, 0, n-sha256.Size)); err != nil {
		return err
	}
	if got := db.Sum(nil); !bytes.Equal(got, c.SHA256[:]) {
		return fmt.Errorf("%w: expected sha256 %x, got %x", ErrCorrupt, c.SHA256, got)
	}
	// etcdutl's Status opens a path with bbolt (read-only, mmap): the
	// memfd's, which names this process's descriptor.
	st, err := snapshot.NewV3(zap.NewNop()).Status(c.path())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	c.Status = st
	return nil
}

func (c *Clear) path() string { return fmt.Sprintf("/proc/self/fd/%d", c.f.Fd()) }

// Size is the snapshot's size, with its trailer.
func (c *Clear) Size() int64 { return c.size }

// Reader reads the snapshot from its start (EtcdRecover's upload).
func (c *Clear) Reader() io.ReadSeeker { return io.NewSectionReader(c.f, 0, c.size) }

// Close frees the snapshot.
func (c *Clear) Close() error { return c.f.Close() }

// Meta is m completed with what the snapshot itself says.
func (c *Clear) Meta(m Meta) Meta {
	m.Format = Format
	m.Revision, m.Hash, m.TotalKeys, m.TotalSize = c.Status.Revision, c.Status.Hash, c.Status.TotalKey, c.Status.TotalSize
	m.Bytes, m.SHA256 = c.size, hex.EncodeToString(c.SHA256[:])
	return m
}

// Target is where a snapshot file goes: out is a file, or a directory
// (empty: the current one) that the default name (Meta.FileName) goes
// into. A file that exists is refused unless force. It is checked before
// anything is asked of the cluster, and again as the file is linked in.
func Target(out string, force bool) (dir, file string, err error) {
	if out == "" {
		out = "."
	}
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		return out, "", nil
	}
	dir = filepath.Dir(out)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("--out %s: the directory %s does not exist", out, dir)
	}
	if _, err := os.Lstat(out); err == nil && !force {
		return "", "", fmt.Errorf("--out %s exists; give another path, or --force to replace it", out)
	}
	return dir, out, nil
}

// Seal writes the snapshot and m age-encrypted for rs to file, or to
// dir/m.FileName() when file is empty, and returns the path. It writes a
// temporary file (0600) in the same directory, syncs it, and then links it
// in (an existing file is refused, decided by the kernel) or, with force,
// renames it over; on any error the temporary file is removed, so a failed
// run leaves nothing behind.
func (c *Clear) Seal(m Meta, rs []age.Recipient, dir, file string, force bool) (string, error) {
	if file == "" {
		file = filepath.Join(dir, m.FileName())
	}
	tmp, err := os.CreateTemp(dir, ".milner-etcd-snapshot-*.part") // 0600
	if err != nil {
		return "", err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone once linked or renamed
	err = c.write(tmp, m, rs)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write %s: %w", file, err)
	}
	if force {
		err = os.Rename(tmp.Name(), file)
	} else if err = os.Link(tmp.Name(), file); errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("%s exists; give another --out, or --force to replace it", file)
	}
	if err != nil {
		return "", err
	}
	return file, nil
}

// write streams age(tar(meta.json, db.snapshot)) to w.
func (c *Clear) write(w io.Writer, m Meta, rs []age.Recipient) error {
	meta, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	enc, err := age.Encrypt(w, rs...)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(enc)
	mod := m.TakenAt.UTC()
	if err := entry(tw, metaEntry, int64(len(meta)), mod, bytes.NewReader(meta)); err != nil {
		return err
	}
	if err := entry(tw, snapshotEntry, c.size, mod, io.NewSectionReader(c.f, 0, c.size)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return enc.Close() // the last chunk and its tag
}

func entry(tw *tar.Writer, name string, size int64, mod time.Time, r io.Reader) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: size, ModTime: mod, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := io.Copy(tw, r)
	return err
}

// Open decrypts a snapshot file with the age key file identity, into
// memory, verifies the snapshot (Load) and checks it is the one meta.json
// recorded (revision, hash, sha256). The caller closes the Clear.
func Open(path, identity string) (Meta, *Clear, error) {
	var m Meta
	key, err := os.ReadFile(identity)
	if err != nil {
		return m, nil, fmt.Errorf("--identity: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return m, nil, err
	}
	defer func() { _ = f.Close() }()
	plain, err := secretsbundle.DecryptReader(f, bytes.NewReader(key))
	if err != nil {
		return m, nil, fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(plain)
	if err := next(tr, metaEntry); err != nil {
		return m, nil, fmt.Errorf("%s: %w", path, err)
	}
	dec := json.NewDecoder(io.LimitReader(tr, maxMeta))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, nil, fmt.Errorf("%s: %s: %w", path, metaEntry, err)
	}
	if m.Format != Format {
		return m, nil, fmt.Errorf("%s: format %d, this milner reads %d", path, m.Format, Format)
	}
	if err := next(tr, snapshotEntry); err != nil {
		return m, nil, fmt.Errorf("%s: %w", path, err)
	}
	c, err := Load(tr)
	if err != nil {
		return m, nil, fmt.Errorf("%s: %w", path, err)
	}
	if got := c.Meta(m); got != m {
		_ = c.Close()
		return m, nil, fmt.Errorf("%s: %w: the snapshot is revision %d hash %08x sha256 %s, its meta.json recorded revision %d hash %08x sha256 %s",
			path, ErrCorrupt, got.Revision, got.Hash, got.SHA256, m.Revision, m.Hash, m.SHA256)
	}
	return m, c, nil
}

func next(tr *tar.Reader, want string) error {
	h, err := tr.Next()
	if err != nil {
		return fmt.Errorf("%w: no %s entry: %w", ErrCorrupt, want, err)
	}
	if h.Name != want {
		return fmt.Errorf("%w: entry %q where %s was expected", ErrCorrupt, h.Name, want)
	}
	return nil
}

// Write prints m as one line for an operator.
func (m Meta) Write(w io.Writer) {
	_, _ = fmt.Fprintf(w, "cluster %s (stack %s), from %s at %s: etcd revision %d, hash %08x, %d keys, %d bytes (sha256 %s)\n",
		m.Cluster, m.Stack, m.Node, m.TakenAt.UTC().Format(time.RFC3339), m.Revision, m.Hash, m.TotalKeys, m.Bytes, shortHex(m.SHA256))
}

func shortHex(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return strings.ToLower(s)
}
