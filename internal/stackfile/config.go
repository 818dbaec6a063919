package stackfile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Project is the Pulumi project name: the namespace of every key a stack
// file's config block gives without one.
const Project = "milner"

// ReadConfig reads the config block of a Pulumi.<stack>.yaml into raw
// config values as the engine passes them to a program: strings as they
// are, everything else as JSON, keys namespaced by the project. Encrypted
// (secure:) values are skipped: they need the stack's passphrase (see
// SecureKeys).
func ReadConfig(path string) (map[string]string, error) {
	block, err := readConfigBlock(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range block {
		if isSecure(v) {
			continue
		}
		if out[k], err = RawValue(v); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", filepath.Base(path), k, err)
		}
	}
	return out, nil
}

// SecureKeys lists, sorted, the keys of a stack file whose values are
// encrypted (set with `pulumi config set --secret`).
func SecureKeys(path string) ([]string, error) {
	block, err := readConfigBlock(path)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k, v := range block {
		if isSecure(v) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// RawValue is one config value as the engine passes it to a program: a
// string as it is, anything else as JSON.
func RawValue(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// readConfigBlock reads the config block of a stack file, keys namespaced
// by the project.
func readConfigBlock(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Config map[string]any `yaml:"config"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	out := make(map[string]any, len(file.Config))
	for k, v := range file.Config {
		if !strings.Contains(k, ":") {
			k = Project + ":" + k
		}
		out[k] = v
	}
	return out, nil
}

// isSecure reports an encrypted value ({secure: <ciphertext>}).
func isSecure(v any) bool {
	m, ok := v.(map[string]any)
	return ok && len(m) == 1 && m["secure"] != nil
}
