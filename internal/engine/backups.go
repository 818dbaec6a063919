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
	b, _, list, err := s.listBackups(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }()
	for i := range list {
		dep, err := readBackup(ctx, b, list[i].key)
		if err != nil {
			return nil, fmt.Errorf("stack %q: backup %s: %w", s.name, list[i].ID, err)
		}
		list[i].Resources = len(dep.Resources)
	}
	return list, nil
}

// ReadBackup returns the deployment a backup holds ("latest": the newest).
func (s *Stack) ReadBackup(ctx context.Context, id string) (*apitype.DeploymentV3, error) {
	b, _, key, err := s.findBackup(ctx, id)
	if err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }()
	return readBackup(ctx, b, key)
}

// Restore makes a backup the stack's state again, through the backend's
// own import (which keeps <stack>.json.bak), holding the backend's lock
// from reading the current state to the import (editState). The state it
// replaces is first kept as a backup of its own, so a restore can itself
// be undone. It changes no infrastructure: the next preview shows how
// reality differs from the restored state.
func (s *Stack) Restore(ctx context.Context, id string) error {
	if err := checkBackupsOn(); err != nil {
		return err
	}
	b, st, key, err := s.findBackup(ctx, id)
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	dep, err := readBackup(ctx, b, key)
	if err != nil {
		return fmt.Errorf("stack %q: backup %s: %w", s.name, id, err)
	}
	raw, err := json.Marshal(dep)
	if err != nil {
		return err
	}
	return s.editState(ctx, st, func(current *apitype.UntypedDeployment) error {
		chk, err := stack.MarshalUntypedDeploymentToVersionedCheckpoint(st.Ref().FullyQualifiedName(), current)
		if err != nil {
			return fmt.Errorf("stack %q: keep the current state: %w", s.name, err)
		}
		kept, err := json.Marshal(chk)
		if err != nil {
			return fmt.Errorf("stack %q: keep the current state: %w", s.name, err)
		}
		if err := b.WriteAll(ctx, fmt.Sprintf("%s/%s.%d.json", path.Dir(key), s.name, time.Now().UnixNano()), kept, nil); err != nil {
			return fmt.Errorf("stack %q: keep the current state: %w", s.name, err)
		}
		*current = apitype.UntypedDeployment{Version: 3, Deployment: raw}
		return nil
	})
}

// listBackups opens the bucket the DIY backend keeps the stack in and
// lists the backups in the stack's backup directory, newest first, without
// reading them.
func (s *Stack) listBackups(ctx context.Context) (*blob.Bucket, backend.Stack, []Backup, error) {
	st, err := s.existing(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if st == nil {
		return nil, nil, nil, fmt.Errorf("stack %q: no state in %s", s.name, s.shown)
	}
	ref, ok := st.Ref().(interface{ BackupDir() string })
	if !ok {
		return nil, nil, nil, fmt.Errorf("stack %q: backend %s keeps no checkpoint backups", s.name, s.shown)
	}
	b, err := s.openBucket(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("stack %q: backend %s: %w", s.name, s.shown, err)
	}
	dir := path.Clean(strings.ReplaceAll(ref.BackupDir(), "\\", "/"))
	var out []Backup
	err = eachKey(ctx, b, dir+"/", func(key string) {
		// <stack>.<unix-nanos>.json[.gz|.zst], as backupStack names them.
		rest, ok := strings.CutPrefix(path.Base(key), s.name+".")
		id, ext, _ := strings.Cut(rest, ".")
		nanos, err := strconv.ParseInt(id, 10, 64)
		if ok && err == nil && strings.HasPrefix(ext, "json") {
			out = append(out, Backup{ID: id, Time: time.Unix(0, nanos).UTC(), key: key})
		}
	})
	if err != nil {
		_ = b.Close()
		return nil, nil, nil, fmt.Errorf("stack %q: list backups: %w", s.name, err)
	}
	slices.SortFunc(out, func(a, b Backup) int { return strings.Compare(b.ID, a.ID) })
	return b, st, out, nil
}

// findBackup finds a backup by id ("latest" is the newest).
func (s *Stack) findBackup(ctx context.Context, id string) (*blob.Bucket, backend.Stack, string, error) {
	b, st, list, err := s.listBackups(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	for _, bk := range list {
		if bk.ID == id || id == "latest" {
			return b, st, bk.key, nil
		}
	}
	_ = b.Close()
	return nil, nil, "", fmt.Errorf("stack %q: no backup %s in %s (see `milner state backups`)", s.name, id, s.shown)
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

// eachKey calls f with the key of every object under prefix in b.
func eachKey(ctx context.Context, b *blob.Bucket, prefix string, f func(key string)) error {
	it := b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		f(obj.Key)
	}
}
