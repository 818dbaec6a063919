package stackfile

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
)

// Load reads a Pulumi.<stack>.yaml with Pulumi's own stack-file loader, the
// one the engine reads it with: keys a config block gives without a
// namespace get project's (the program's is stacks/config.Namespace).
// Every reader of a stack file goes through it.
func Load(project, path string) (*workspace.ProjectStack, error) {
	proj := &workspace.Project{Name: tokens.PackageName(project)}
	ps, err := workspace.LoadProjectStack(nil, proj, path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return ps, nil
}

// Plain turns a stack's config into the raw values the engine passes a
// program (strings as they are, objects as JSON), leaving the encrypted
// (secure:) values out: those need the stack's passphrase. secure lists
// their keys, sorted.
func Plain(m config.Map) (raw map[string]string, secure []string, err error) {
	raw = make(map[string]string, len(m))
	for k, v := range m {
		if v.Secure() {
			secure = append(secure, k.String())
			continue
		}
		if raw[k.String()], err = v.Value(config.NopDecrypter); err != nil {
			return nil, nil, fmt.Errorf("config %s: %w", k, err)
		}
	}
	slices.Sort(secure)
	return raw, secure, nil
}

// Read reads a stack file's plain config as raw values and the keys of
// its encrypted values (see Plain).
func Read(project, path string) (raw map[string]string, secure []string, err error) {
	ps, err := Load(project, path)
	if err != nil {
		return nil, nil, err
	}
	return Plain(ps.Config)
}
