package engine

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pulumi/pulumi/pkg/v3/backend/diy/postgres"
	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// ErrLockLost is wrapped by the error of a state write refused because
// Milner's PostgreSQL advisory lock is no longer held.
var ErrLockLost = errors.New("milner's lock on the stack was lost")

// A session-level advisory lock lives as long as its session: an
// idle_session_timeout, a failover, a transaction pooler or a
// pg_terminate_backend ends it silently, and another milner can then take
// the stack while this one goes on writing. So every write of the DIY
// backend to a postgres:// state is checked first: the backend is opened
// on lockScheme, whose bucket is PostgreSQL's own (pkg/v3
// backend/diy/postgres) wrapped to ask, on the lock's own connection,
// whether that session still holds the lock. The DIY backend's snapshot
// persister, history and backups all write through its one bucket
// (backend/diy/snapshot.go diySnapshotPersister.Save -> saveStack ->
// saveCheckpoint -> bucket.WriteAll), so a lost lock stops the engine at
// its next state write, before anything is written. The backend's own
// lock objects (.pulumi/locks/) are not checked: releasing them must not
// fail. A state object is written on the lock's own session, in one
// statement that writes only while that session holds the lock
// (lockedWriter, Copy): a session-level advisory lock ends only with an
// unlock or its session, so no gap is left between the check and the
// write. Delete is checked first, then done.
const lockScheme = "milner+postgres"

// lockParam carries, in a lockScheme URL, which Stack's check applies.
const lockParam = "milner_lock"

// lockChecks maps a lockParam value to its Stack's check.
var (
	lockChecks sync.Map
	lockSeq    atomic.Int64
)

func init() { blob.DefaultURLMux().RegisterBucket(lockScheme, lockOpener{}) }

// advisoryLockRow selects, in pg_locks l, the granted advisory lock on a
// bigint key: its (classid, objid) are the key's high and low 32 bits,
// objsubid 1 (PostgreSQL docs, pg_locks); $1 and $2 are advisoryLockArgs.
const advisoryLockRow = `l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.classid = $1 AND l.objid = $2`

func advisoryLockArgs(key int64) []any {
	return []any{int64(uint32(uint64(key) >> 32)), int64(uint32(key))}
}

// lockCheck is one Stack's lock as the state writes check it.
type lockCheck struct {
	mu    sync.Mutex
	conn  *sql.Conn // the connection that took the lock; nil: no lock held
	key   int64
	stack string
	name  string
	// session is the backend pid of the server session that took the lock.
	// Behind a pooler a client connection is not one server session: each
	// write must run on this one, and this one must still hold the lock.
	session int
}

// heldBySession is the condition, in SQL, that the session running the
// statement holds the lock: $1 and $2 are advisoryLockArgs.
const heldBySession = `EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = pg_backend_pid() AND ` + advisoryLockRow + `)`

// heldBy is the condition, in SQL, that the statement runs on the session
// that took the lock, $3 (its backend pid), and that session still holds
// it: $1 and $2 are advisoryLockArgs.
const heldBy = `pg_backend_pid() = $3 AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = $3 AND ` + advisoryLockRow + `)`

// hold records the lock named name, taken on conn by the server session
// with backend pid session; release forgets it.
func (c *lockCheck) hold(conn *sql.Conn, key int64, name string, session int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn, c.key, c.name, c.session = conn, key, name, session
}

func (c *lockCheck) release() { c.hold(nil, 0, "", 0) }

// heldByArgs are the arguments of heldBy: the key's halves and the session.
func (c *lockCheck) heldByArgs() []any { return append(advisoryLockArgs(c.key), c.session) }

// held is the backend pid of the session holding the lock (0: none).
func (c *lockCheck) held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// holding reports whether this process holds the lock (or held it, and
// lost it: the write then fails).
func (c *lockCheck) holding() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn != nil
}

// verify returns nil while this process holds no lock or the session that
// took it still holds it.
func (c *lockCheck) verify(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	var held bool
	err := c.conn.QueryRowContext(ctx, `SELECT `+heldBy, c.heldByArgs()...).Scan(&held)
	if err == nil && held {
		return nil
	}
	return c.lost(err)
}

// write runs stmt, whose condition is heldBy (args from $4), on the lock's
// own connection: it changes a row only on the session that took the lock
// and only while that session holds it. held is false when no lock is
// held by this process (write did nothing).
func (c *lockCheck) write(ctx context.Context, stmt string, args ...any) (held bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return false, nil
	}
	res, err := c.conn.ExecContext(ctx, stmt, append(c.heldByArgs(), args...)...)
	if err != nil {
		return true, c.lost(err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return true, c.lost(err)
	}
	return true, nil
}

// lost is the error of a state write refused because the lock is lost
// (err: why the session could not answer; nil: it no longer holds it).
func (c *lockCheck) lost(err error) error {
	why := fmt.Sprintf("its session (backend pid %d) no longer holds it, or this connection no longer runs on that session", c.session)
	if err != nil {
		why = "its session ended: " + err.Error()
	}
	return fmt.Errorf("stack %q: %w (PostgreSQL advisory lock %q: %s; an idle_session_timeout, a failover, a transaction-pooling proxy or pg_terminate_backend ends it): "+
		"the state write was refused so that no other operation's state is overwritten; what the engine did since its last write is not recorded: "+
		"run `milner state locks --stack %s`, then `milner preview --stack %s` (its guard names any live object the state lacks)",
		c.stack, ErrLockLost, c.name, why, c.stack, c.stack)
}

// checkedURL returns the URL the DIY backend is opened on: for postgres://,
// the same database under lockScheme, tied to check.
func checkedURL(raw string, check *lockCheck) string {
	rest, ok := strings.CutPrefix(raw, "postgres://")
	if !ok {
		return raw
	}
	id := strconv.FormatInt(lockSeq.Add(1), 10)
	lockChecks.Store(id, check)
	sep := "?"
	if strings.Contains(rest, "?") {
		sep = "&"
	}
	return lockScheme + "://" + rest + sep + lockParam + "=" + id
}

// lockOpener opens a lockScheme URL: PostgreSQL's bucket, checked.
type lockOpener struct{}

func (lockOpener) OpenBucketURL(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	pg := *u
	pg.Scheme = "postgres"
	q := pg.Query()
	id := q.Get(lockParam)
	q.Del(lockParam)
	pg.RawQuery = q.Encode()
	c, ok := lockChecks.Load(id)
	if !ok {
		return nil, fmt.Errorf("%s: no lock check %q", lockScheme, id)
	}
	inner, err := postgres.URLHandler{}.OpenBucketURL(ctx, &pg)
	if err != nil {
		return nil, err
	}
	table := q.Get("table")
	if table == "" {
		table = "pulumi_state" // pkg/v3 backend/diy/postgres NewPostgresBucket's default
	}
	return blob.NewBucket(&checkedBucket{inner: inner, check: c.(*lockCheck), table: table}), nil
}

// checkedBucket is a driver.Bucket over a *blob.Bucket that verifies the
// lock before every write.
type checkedBucket struct {
	inner *blob.Bucket
	check *lockCheck
	table string // the state table (the URL's table parameter)
}

var _ driver.Bucket = (*checkedBucket)(nil)

// backendLock reports whether key is one of the DIY backend's own lock
// objects, which are never checked.
func backendLock(key string) bool {
	return strings.HasPrefix(key, ".pulumi/locks/") || strings.Contains(key, "/.pulumi/locks/")
}

// before refuses a write to key when the lock is lost.
func (b *checkedBucket) before(ctx context.Context, key string) error {
	if backendLock(key) {
		return nil
	}
	return b.check.verify(ctx)
}

func (b *checkedBucket) NewTypedWriter(ctx context.Context, key, contentType string, o *driver.WriterOptions) (driver.Writer, error) {
	if err := b.before(ctx, key); err != nil {
		return nil, err
	}
	if !backendLock(key) && b.check.holding() {
		return &lockedWriter{ctx: ctx, b: b, key: key}, nil
	}
	return b.inner.NewWriter(ctx, key, &blob.WriterOptions{
		BufferSize: o.BufferSize, MaxConcurrency: o.MaxConcurrency, CacheControl: o.CacheControl,
		ContentDisposition: o.ContentDisposition, ContentEncoding: o.ContentEncoding, ContentLanguage: o.ContentLanguage,
		ContentType: contentType, ContentMD5: o.ContentMD5, Metadata: o.Metadata, BeforeWrite: o.BeforeWrite,
		IfNotExist: o.IfNotExist, DisableContentTypeDetection: true,
	})
}

func (b *checkedBucket) Copy(ctx context.Context, dst, src string, _ *driver.CopyOptions) error {
	if err := b.before(ctx, dst); err != nil {
		return err
	}
	if !backendLock(dst) {
		// SECURITY: the table name is the backend URL's, as pkg/v3's own statements use it.
		stmt := fmt.Sprintf(`INSERT INTO %s (key, data) SELECT $4, data FROM %s WHERE key = $5 AND `+heldBy+
			` ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data, updated_at = now()`, b.table, b.table) //nolint:gosec
		if held, err := b.check.write(ctx, stmt, dst, src); held {
			return err // a missing src reads as a lost lock: the engine copies only what it has written
		}
	}
	return b.inner.Copy(ctx, dst, src, nil)
}

// lockedWriter writes one state object as pkg/v3's PostgreSQL bucket does
// (backend/diy/postgres bucket.go postgresWriter.Close: the bytes base64 in
// a JSON {"data": ...}, upserted by key), but on the lock's own session and
// only while it holds the lock.
type lockedWriter struct {
	ctx context.Context
	b   *checkedBucket
	key string
	buf bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }
func (w *lockedWriter) As(any) bool                 { return false }

func (w *lockedWriter) Close() error {
	data, err := json.Marshal(struct {
		Data string `json:"data"`
	}{base64.StdEncoding.EncodeToString(w.buf.Bytes())})
	if err != nil {
		return err
	}
	// SECURITY: the table name is the backend URL's, as pkg/v3's own statements use it.
	stmt := fmt.Sprintf(`INSERT INTO %s (key, data) SELECT $4, $5::json WHERE `+heldBy+
		` ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data, updated_at = now()`, w.b.table) //nolint:gosec
	if held, err := w.b.check.write(w.ctx, stmt, w.key, string(data)); held {
		return err
	}
	return w.b.inner.WriteAll(w.ctx, w.key, w.buf.Bytes(), nil) // released since NewTypedWriter: unchecked, as before the lock
}

func (b *checkedBucket) Delete(ctx context.Context, key string, _ *driver.DeleteOptions) error {
	if err := b.before(ctx, key); err != nil {
		return err
	}
	return b.inner.Delete(ctx, key)
}

// The reads pass through.

func (b *checkedBucket) ErrorCode(err error) gcerrors.ErrorCode { return gcerrors.Code(err) }
func (b *checkedBucket) As(i any) bool                          { return b.inner.As(i) }
func (b *checkedBucket) ErrorAs(err error, i any) bool          { return b.inner.ErrorAs(err, i) }
func (b *checkedBucket) Close() error                           { return b.inner.Close() }

func (b *checkedBucket) SignedURL(context.Context, string, *driver.SignedURLOptions) (string, error) {
	return "", fmt.Errorf("%s: no signed URLs", lockScheme)
}

func (b *checkedBucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	a, err := b.inner.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{CacheControl: a.CacheControl, ContentDisposition: a.ContentDisposition, ContentEncoding: a.ContentEncoding,
		ContentLanguage: a.ContentLanguage, ContentType: a.ContentType, Metadata: a.Metadata, CreateTime: a.CreateTime,
		ModTime: a.ModTime, Size: a.Size, MD5: a.MD5, ETag: a.ETag}, nil
}

func (b *checkedBucket) ListPaged(ctx context.Context, o *driver.ListOptions) (*driver.ListPage, error) {
	token := o.PageToken
	if len(token) == 0 {
		token = blob.FirstPageToken
	}
	size := o.PageSize
	if size <= 0 {
		size = 1000
	}
	objs, next, err := b.inner.ListPage(ctx, token, size, &blob.ListOptions{Prefix: o.Prefix, Delimiter: o.Delimiter, BeforeList: o.BeforeList})
	if err != nil {
		return nil, err
	}
	page := &driver.ListPage{NextPageToken: next}
	for _, obj := range objs {
		page.Objects = append(page.Objects, &driver.ListObject{Key: obj.Key, ModTime: obj.ModTime, Size: obj.Size, MD5: obj.MD5, IsDir: obj.IsDir})
	}
	return page, nil
}

func (b *checkedBucket) NewRangeReader(ctx context.Context, key string, offset, length int64, _ *driver.ReaderOptions) (driver.Reader, error) {
	r, err := b.inner.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, err
	}
	return checkedReader{r}, nil
}

// checkedReader is a *blob.Reader as a driver.Reader.
type checkedReader struct{ *blob.Reader }

func (r checkedReader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{ContentType: r.ContentType(), ModTime: r.ModTime(), Size: r.Size()}
}
