// Package docs renders the committed stack configs into the docs that
// describe them (node inventory, apps, a diagram of the layers), so that the
// docs are generated from the source of truth and a test catches any drift.
package docs

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks/config"
)

// Placeholder is the value every secret config key gets when a stack is
// loaded without its passphrase. Nothing rendered ever shows a secret.
const Placeholder = config.PlaceholderSecret

// Stack is one committed stack file, loaded without its secrets.
type Stack struct {
	// Name is the stack name, from Pulumi.<name>.yaml.
	Name string
	// Raw is the stack's config as the engine passes it to the program, with
	// Placeholder for every secret key.
	Raw map[string]string
	// SecretKeys are the full keys (milner:x) given Placeholder values.
	SecretKeys []string
	// Config is the typed, validated config.
	Config *config.Config
}

// StackFiles returns the stack files committed in root, sorted by name.
func StackFiles(root string) ([]string, error) {
	return filepath.Glob(filepath.Join(root, "Pulumi.*.yaml")) // sorted, as Glob returns them
}

// StackName returns the stack name of a Pulumi.<stack>.yaml path.
func StackName(path string) string {
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "Pulumi."), ".yaml")
}

// source is raw config by full key with its secret keys: the ConfigSource
// config.Load reads.
type source struct {
	raw     map[string]string
	secrets []string
}

func (s source) GetConfig(key string) (string, bool) {
	v, ok := s.raw[key]
	return v, ok
}

func (s source) IsConfigSecret(key string) bool { return slices.Contains(s.secrets, key) }

// ReadStack reads and validates one stack file. Secret keys (the encrypted
// values in the file and those the apps name in secretValues) get
// Placeholder values, so a stack loads without its passphrase.
func ReadStack(path string) (*Stack, error) {
	name := StackName(path)
	raw, secure, err := stackfile.Read(config.Namespace, path)
	if err != nil {
		return nil, fmt.Errorf("stack %s: %w", name, err)
	}
	secrets := secretKeys(secure, raw)
	for _, k := range secrets {
		raw[k] = Placeholder
	}
	return NewStack(name, raw, secrets)
}

// NewStack loads and validates a stack's raw config (full keys), with the
// keys in secrets marked secret.
func NewStack(name string, raw map[string]string, secrets []string) (*Stack, error) {
	cfg, err := config.Load(source{raw: raw, secrets: secrets})
	if err != nil {
		return nil, fmt.Errorf("stack %s: %w", name, err)
	}
	return &Stack{Name: name, Raw: raw, SecretKeys: secrets, Config: cfg}, nil
}

// ReadStacks reads every stack file committed in root.
func ReadStacks(root string) ([]*Stack, error) {
	files, err := StackFiles(root)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Pulumi.<stack>.yaml in %s", root)
	}
	var out []*Stack
	for _, f := range files {
		s, err := ReadStack(f)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// secretKeys lists the secret keys of a stack file, sorted: the keys whose
// values are encrypted (secure:), the keys the apps layer reads
// (config.AppsSecrets), and the Proxmox API token of a Proxmox stack.
func secretKeys(keys []string, raw map[string]string) []string {
	add := func(k string) {
		if k = config.Key(k); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, need := range config.AppsSecrets(source{raw: raw}) {
		add(need.Key)
	}
	// Lenient: Load reports a malformed substrate.
	var sub config.SubstrateConfig
	_ = json.Unmarshal([]byte(raw[config.Key("substrate")]), &sub)
	if sub.Kind == config.KindProxmox {
		add(config.ProxmoxTokenKey)
	}
	slices.Sort(keys)
	return keys
}
