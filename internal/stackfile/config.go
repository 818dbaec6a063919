package stackfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	pconfig "github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"

	"github.com/milner/milner/stacks/config"
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

// Path is the stack file of stack name in the project directory dir.
func Path(dir, name string) string { return filepath.Join(dir, "Pulumi."+name+".yaml") }

// Name is the stack name of a Pulumi.<stack>.yaml path.
func Name(path string) string {
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "Pulumi."), ".yaml")
}

// Files returns the stack files committed in dir, sorted by name.
func Files(dir string) ([]string, error) {
	return filepath.Glob(Path(dir, "*")) // sorted, as Glob returns them
}

// Stack is one stack's config, loaded by the program's own loader
// (config.Load: strict decode, defaults, every problem at once). It is the
// config.ConfigSource it was loaded from, for the readers of raw keys.
type Stack struct {
	// Name is the stack name.
	Name string
	// Dir is the project directory relative chart paths are read from;
	// "" for the working directory.
	Dir string
	// Raw is the config as the engine passes it to the program (full key →
	// strings as they are, objects as JSON), secrets included.
	Raw map[string]string
	// SecretKeys are the full keys (milner:x) that are secret, sorted.
	SecretKeys []string
	// Config is the typed, validated config.
	Config *config.Config
}

func (s *Stack) GetConfig(key string) (string, bool) {
	v, ok := s.Raw[key]
	return v, ok
}

func (s *Stack) IsConfigSecret(key string) bool { return slices.Contains(s.SecretKeys, key) }

func (s *Stack) RootDirectory() string { return s.Dir }

// ConfigKeys lists every key of the stack file, in any namespace
// (config.KeyLister): the loader refuses an unknown milner: key and reads
// every plain value for a credential.
func (s *Stack) ConfigKeys() ([]string, bool) { return slices.Sorted(maps.Keys(s.Raw)), true }

// Read reads the stack file at path and loads its config. decrypt gives
// the decrypter for the file's passphrase salt; nil loads the stack
// without its passphrase: every secret, those the file holds and those its
// apps and substrate need, is config.PlaceholderSecret (Pulumi's blinding
// decrypter's value), so that it validates.
func Read(path string, decrypt func(salt string) pconfig.Decrypter) (*Stack, error) {
	name := Name(path)
	ps, err := Load(config.Namespace, path)
	if err != nil {
		return nil, fmt.Errorf("stack %q: %w", name, err)
	}
	dec := pconfig.NewBlindingDecrypter()
	if decrypt != nil {
		dec = decrypt(ps.EncryptionSalt)
	}
	raw, secretKeys := map[string]string{}, []string{}
	for k, v := range ps.Config {
		if v.Secure() {
			secretKeys = append(secretKeys, k.String())
		}
		if raw[k.String()], err = v.Value(dec); err != nil {
			return nil, fmt.Errorf("stack %q: config %s: %w", name, k, err)
		}
	}
	if decrypt == nil {
		secretKeys = placeholders(raw, secretKeys)
	}
	return New(name, filepath.Dir(path), raw, secretKeys)
}

// New loads a stack's raw config (full keys) with the keys in secretKeys
// secret; dir is the project directory ("" for the working directory).
func New(name, dir string, raw map[string]string, secretKeys []string) (*Stack, error) {
	s := &Stack{Name: name, Dir: dir, Raw: raw, SecretKeys: slices.Sorted(slices.Values(secretKeys))}
	cfg, err := config.Load(s)
	if err != nil {
		return nil, fmt.Errorf("stack %q: %w", name, err)
	}
	s.Config = cfg
	return s, nil
}

// placeholders sets the secrets raw lacks to config.PlaceholderSecret: the
// keys the apps layer reads (config.AppsSecrets) and the Proxmox API token
// of a Proxmox stack. It returns the secret keys with them. A key the file
// holds keeps its value: `milner check` sees what the engine sees.
func placeholders(raw map[string]string, secretKeys []string) []string {
	var need []string
	for _, n := range config.AppsSecrets(&Stack{Raw: raw}) {
		need = append(need, config.Key(n.Key))
	}
	// Lenient: Load reports a malformed substrate.
	var sub config.SubstrateConfig
	_ = json.Unmarshal([]byte(raw[config.Key("substrate")]), &sub)
	if sub.Kind == config.KindProxmox {
		need = append(need, config.Key(config.ProxmoxTokenKey))
	}
	for _, k := range need {
		// A key the file holds is judged as the engine would see it: a
		// plain value stays plain (and is refused as such), never replaced
		// by the placeholder.
		if _, held := raw[k]; !held {
			secretKeys = append(secretKeys, k)
			raw[k] = config.PlaceholderSecret
		}
	}
	return secretKeys
}

// ReadDir reads the named stacks of the project directory dir, or every
// stack committed there when none is named, without their passphrase.
func ReadDir(dir string, names ...string) ([]*Stack, error) {
	var files []string
	for _, n := range names {
		files = append(files, Path(dir, n))
	}
	if len(names) == 0 {
		var err error
		if files, err = Files(dir); err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("no Pulumi.<stack>.yaml in %s", dir)
		}
	}
	var out []*Stack
	for _, f := range files {
		s, err := Read(f, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
