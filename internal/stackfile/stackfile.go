// Package stackfile reads a committed Pulumi.<stack>.yaml as the engine
// does, and makes the few edits Milner makes to one: adopt's ids (milner
// adopt), the bootstrap's record, the passphrase salt of a stack's first
// run. Every write goes through Pulumi's own ProjectStack and is made
// under Milner's lock on the stack, to a temporary file renamed over the
// stack file: a reader never sees half a file, and two milners never
// write it at once.
package stackfile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/pulumi/pulumi/sdk/v3/go/common/encoding"
	pconfig "github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"

	"github.com/milner/milner/stacks/config"
)

// Locker takes Milner's lock on the stack (engine.Stack.Lock, re-entrant
// for the Stack that holds it): every write of its stack file happens
// under it.
type Locker interface {
	Lock(ctx context.Context) (release func(), err error)
}

// Change is one edit of a stack file, made on Pulumi's ProjectStack as the
// CLI makes its own (`pulumi config set --path`: config.Map.Set).
type Change func(ps *workspace.ProjectStack) error

// NodeField sets field of the node named node in milner:nodes to value
// (adopt's adoptId, holderAdoptId), as a string.
func NodeField(node, field, value string) Change {
	return func(ps *workspace.ProjectStack) error { return setNodeField(ps, node, field, value) }
}

// Adoption records what `milner adopt --all` adopts: each node's domain id
// as its adoptId, and each other object's id under its logical name in
// milner:substrate's libvirt.adopt.
func Adoption(nodes, objects map[string]string) Change {
	return func(ps *workspace.ProjectStack) error {
		for _, n := range slices.Sorted(maps.Keys(nodes)) {
			if err := setNodeField(ps, n, "adoptId", nodes[n]); err != nil {
				return err
			}
		}
		if len(objects) == 0 {
			return nil
		}
		var sub struct {
			Libvirt map[string]any `json:"libvirt"`
		}
		if err := objectValue(ps, "substrate", &sub); err != nil || sub.Libvirt == nil {
			return fmt.Errorf("no milner:substrate.libvirt mapping")
		}
		for _, logical := range slices.Sorted(maps.Keys(objects)) {
			// Quoted: a logical name is a map key, never a path.
			if err := set(ps, fmt.Sprintf("substrate.libvirt.adopt[%s]", strconv.Quote(logical)), pconfig.NewTypedValue(objects[logical], pconfig.TypeString)); err != nil {
				return err
			}
		}
		return nil
	}
}

// ClusterFlag sets the boolean field of milner:cluster to true (adopt's
// adoptBootstrap).
func ClusterFlag(field string) Change {
	return func(ps *workspace.ProjectStack) error {
		var cl map[string]any
		if err := objectValue(ps, "cluster", &cl); err != nil || cl == nil {
			return fmt.Errorf("no milner:cluster mapping")
		}
		return set(ps, "cluster."+field, pconfig.NewTypedValue("true", pconfig.TypeBool))
	}
}

// Salt sets the passphrase salt of a stack's first run, as `pulumi stack
// init` does (ProjectStack.EncryptionSalt); a salt already there is kept.
func Salt(salt string) Change {
	return func(ps *workspace.ProjectStack) error {
		if ps.EncryptionSalt == "" {
			ps.EncryptionSalt = salt
		}
		return nil
	}
}

// Edit is every edit of a stack file: under lock it reads the file,
// applies change to its ProjectStack, and writes the bytes
// ProjectStack.Save would write (Pulumi's YAML marshaler: yamlutil.Edit of
// the file as read, so comments and layout are kept; list items are
// matched by position, and no change reorders a list) to a temporary file
// it renames over the stack file. Save itself writes in place
// (sdk v3.276.0 workspace/project.go save: os.WriteFile), so it is not
// called. It returns the previous bytes (to put back if the caller's check
// fails).
func Edit(ctx context.Context, lock Locker, path string, change Change) ([]byte, error) {
	release, err := lock.Lock(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	before, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ps, err := loadBytes(config.Namespace, path, before)
	if err != nil {
		return nil, err
	}
	if err := change(ps); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	after, err := encoding.YAML.Marshal(ps)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return before, writeAtomic(path, after)
}

// Restore puts data back as the stack file at path, under lock, as Edit
// writes (adopt's undo).
func Restore(ctx context.Context, lock Locker, path string, data []byte) error {
	release, err := lock.Lock(ctx)
	if err != nil {
		return err
	}
	defer release()
	return writeAtomic(path, data)
}

// writeAtomic replaces the file at path with data: a new file in the same
// directory (created O_EXCL by os.CreateTemp), written, synced, given the
// old file's mode and renamed over it; a reader sees the old file or the
// new one, never a part.
func writeAtomic(path string, data []byte) (err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(fi.Mode().Perm())
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// set sets a milner: config path (`pulumi config set --path` syntax).
func set(ps *workspace.ProjectStack, path string, v pconfig.Value) error {
	k, err := pconfig.ParseKey(config.Key(path))
	if err != nil {
		return err
	}
	return ps.Config.Set(k, v, true)
}

// objectValue decodes the object key milner:<k> into v.
func objectValue(ps *workspace.ProjectStack, k string, v any) error {
	val, ok := ps.Config[pconfig.MustMakeKey(config.Namespace, k)]
	if !ok {
		return errors.New("not set")
	}
	s, err := val.Value(pconfig.NopDecrypter)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), v)
}

// setNodeField sets field of the node named node in milner:nodes.
func setNodeField(ps *workspace.ProjectStack, node, field, value string) error {
	var nodes []struct {
		Name string `json:"name"`
	}
	if err := objectValue(ps, "nodes", &nodes); err != nil {
		return fmt.Errorf("no milner:nodes list")
	}
	var names []string
	for i, n := range nodes {
		if n.Name == node {
			return set(ps, fmt.Sprintf("nodes[%d].%s", i, field), pconfig.NewTypedValue(value, pconfig.TypeString))
		}
		names = append(names, n.Name)
	}
	return fmt.Errorf("no node %q in milner:nodes (nodes: %v)", node, names)
}

// loadBytes is Load of a stack file's bytes, a UTF-8 byte order mark
// stripped as workspace.LoadProjectStack strips it.
func loadBytes(project, path string, b []byte) (*workspace.ProjectStack, error) {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	proj := &workspace.Project{Name: tokens.PackageName(project)}
	ps, err := workspace.LoadProjectStackBytes(nil, proj, b, path, encoding.YAML)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return ps, nil
}
