package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/resource/stack"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/encoding"
	"github.com/pulumi/pulumi/sdk/v3/go/common/env"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
)

// State backups are the DIY backend's own: after every update (up, refresh,
// destroy) it copies the new checkpoint to
// .pulumi/backups/<project>/<stack>/<stack>.<unix-nanos>.json in the same
// bucket as the state (pkg/v3 backend/diy/state.go backupStack, called from
// backend.go apply unless PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS),
// so they live where the state lives: a file directory, or the PostgreSQL
// table. Milner lists and restores them; it never writes state any other
// way than the backend does.

// Backup is one checkpoint the backend kept.
type Backup struct {
	// ID names the backup (the nanosecond timestamp in its file name).
	ID string `json:"id"`
	// Time is when the backend wrote it.
	Time time.Time `json:"time"`
	// Resources is how many resources it holds.
	Resources int `json:"resources"`
	key       string
}

// ErrBackupsDisabled is returned by operations that change state when the
// backend has been told to keep no backups.
var ErrBackupsDisabled = errors.New("state backups are disabled (" + env.DIYBackendDisableCheckpointBackups.Var().Name() + "); Milner keeps a restorable copy of every update, unset it")

// checkBackupsOn refuses to change state without the backend's backups.
func checkBackupsOn() error {
	if env.DIYBackendDisableCheckpointBackups.Value() {
		return ErrBackupsDisabled
	}
	return nil
}

// Backups lists the stack's backups, newest first.
func (s *Stack) Backups(ctx context.Context) ([]Backup, error) {
	b, dir, _, err := s.backupBucket(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }()
	var out []Backup
	it := b.List(&blob.ListOptions{Prefix: dir + "/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("stack %q: list backups: %w", s.name, err)
		}
		id, ok := backupID(s.name, path.Base(obj.Key))
		if !ok {
			continue
		}
		nanos, _ := strconv.ParseInt(id, 10, 64)
		dep, err := readBackup(ctx, b, obj.Key)
		if err != nil {
			return nil, fmt.Errorf("stack %q: backup %s: %w", s.name, id, err)
		}
		out = append(out, Backup{ID: id, Time: time.Unix(0, nanos).UTC(), Resources: len(dep.Resources), key: obj.Key})
	}
	slices.SortFunc(out, func(a, b Backup) int { return strings.Compare(b.ID, a.ID) })
	return out, nil
}

// ReadBackup returns the deployment a backup holds.
func (s *Stack) ReadBackup(ctx context.Context, id string) (*apitype.DeploymentV3, error) {
	b, dir, _, err := s.backupBucket(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }()
	key, err := s.backupKey(ctx, b, dir, id)
	if err != nil {
		return nil, err
	}
	return readBackup(ctx, b, key)
}

// Restore makes a backup the stack's state again, through the backend's
// own import (which takes the backend's lock and keeps <stack>.json.bak).
// The state it replaces is first kept as a backup of its own, so a restore
// can itself be undone. It changes no infrastructure: the next preview
// shows how reality differs from the restored state.
func (s *Stack) Restore(ctx context.Context, id string) error {
	if err := checkBackupsOn(); err != nil {
		return err
	}
	b, dir, st, err := s.backupBucket(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	key, err := s.backupKey(ctx, b, dir, id)
	if err != nil {
		return err
	}
	dep, err := readBackup(ctx, b, key)
	if err != nil {
		return fmt.Errorf("stack %q: backup %s: %w", s.name, id, err)
	}
	release, err := holdBackendLock(ctx, st)
	if err != nil {
		return fmt.Errorf("stack %q: %w", s.name, err)
	}
	imported := false
	defer func() {
		if !imported {
			release()
		}
	}()
	current, err := backend.ExportStackDeployment(ctx, st)
	if err != nil {
		return fmt.Errorf("stack %q: export: %w", s.name, err)
	}
	chk, err := stack.MarshalUntypedDeploymentToVersionedCheckpoint(st.Ref().FullyQualifiedName(), current)
	if err != nil {
		return fmt.Errorf("stack %q: keep the current state: %w", s.name, err)
	}
	raw, err := json.Marshal(chk)
	if err != nil {
		return fmt.Errorf("stack %q: keep the current state: %w", s.name, err)
	}
	keep := fmt.Sprintf("%s/%s.%d.json", dir, s.name, time.Now().UnixNano())
	if err := b.WriteAll(ctx, keep, raw, nil); err != nil {
		return fmt.Errorf("stack %q: keep the current state: %w", s.name, err)
	}
	raw, err = json.Marshal(dep)
	if err != nil {
		return err
	}
	beforeStateImport()
	imported = true
	if err := st.Backend().ImportDeployment(ctx, st, &apitype.UntypedDeployment{Version: 3, Deployment: raw}); err != nil {
		return fmt.Errorf("stack %q: restore backup %s: %w", s.name, id, err)
	}
	return nil
}

// backupBucket opens the bucket the DIY backend keeps the stack in, and
// returns the stack's backup directory in it.
func (s *Stack) backupBucket(ctx context.Context) (*blob.Bucket, string, backend.Stack, error) {
	st, err := s.existing(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	if st == nil {
		return nil, "", nil, fmt.Errorf("stack %q: no state in %s", s.name, s.shown)
	}
	ref, ok := st.Ref().(interface{ BackupDir() string })
	if !ok {
		return nil, "", nil, fmt.Errorf("stack %q: backend %s keeps no checkpoint backups", s.name, s.shown)
	}
	b, err := s.openBucket(ctx)
	if err != nil {
		return nil, "", nil, fmt.Errorf("stack %q: backend %s: %w", s.name, s.shown, err)
	}
	return b, path.Clean(strings.ReplaceAll(ref.BackupDir(), "\\", "/")), st, nil
}

// openBucket opens the backend's bucket as the DIY backend does
// (pkg/v3 backend/diy/backend.go newDIYBackend): a file:// directory
// without temporary files elsewhere; any other URL through gocloud's
// default mux (the backend registers postgres://), prefixed by the URL's
// path.
func (s *Stack) openBucket(ctx context.Context) (*blob.Bucket, error) {
	if strings.HasPrefix(s.url, "file://") {
		dir, err := fileStateDir(s.url)
		if err != nil {
			return nil, err
		}
		return fileblob.OpenBucket(dir, &fileblob.Options{NoTempDir: true})
	}
	b, err := blob.OpenBucket(ctx, s.url)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(s.url)
	if err != nil {
		return nil, err
	}
	if sub := strings.TrimLeft(u.Path, "/"); sub != "" {
		b = blob.PrefixedBucket(b, strings.TrimSuffix(sub, "/")+"/")
	}
	return b, nil
}

// backupKey finds a backup by id ("latest" is the newest).
func (s *Stack) backupKey(ctx context.Context, b *blob.Bucket, dir, id string) (string, error) {
	if id == "latest" {
		all, err := s.Backups(ctx)
		if err != nil {
			return "", err
		}
		if len(all) == 0 {
			return "", fmt.Errorf("stack %q: no backups in %s", s.name, s.shown)
		}
		return all[0].key, nil
	}
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		return "", fmt.Errorf("stack %q: %q is not a backup id (see `milner state backups`)", s.name, id)
	}
	for _, ext := range []string{".json", ".json.gz", ".json.zst"} {
		key := fmt.Sprintf("%s/%s.%s%s", dir, s.name, id, ext)
		if ok, err := b.Exists(ctx, key); err != nil {
			return "", err
		} else if ok {
			return key, nil
		}
	}
	return "", fmt.Errorf("stack %q: no backup %s in %s (see `milner state backups`)", s.name, id, s.shown)
}

// backupID returns the id of a backup file of stack, as backupStack names it.
func backupID(stackName, file string) (string, bool) {
	rest, ok := strings.CutPrefix(file, stackName+".")
	if !ok {
		return "", false
	}
	id, ext, _ := strings.Cut(rest, ".")
	if _, err := strconv.ParseInt(id, 10, 64); err != nil || !strings.HasPrefix(ext, "json") {
		return "", false
	}
	return id, true
}

// readBackup decodes a checkpoint file, compressed or not, as the backend
// reads its own (state.go getCheckpoint).
func readBackup(ctx context.Context, b *blob.Bucket, key string) (*apitype.DeploymentV3, error) {
	raw, err := b.ReadAll(ctx, key)
	if err != nil {
		return nil, err
	}
	m := encoding.Compress(encoding.JSON, encoding.DetectCompression(raw))
	chk, _, _, err := stack.UnmarshalVersionedCheckpointToLatestCheckpoint(m, raw)
	if err != nil {
		return nil, err
	}
	if chk.Latest == nil {
		return &apitype.DeploymentV3{}, nil
	}
	return chk.Latest, nil
}
