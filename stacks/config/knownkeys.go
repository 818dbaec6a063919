package config

// Every milner: key is known (issue #49, class 4): the loader reads keys by
// name, so a misspelt key (milner:workload for milner:workloads) would be
// read by nobody, and the whole section it holds (the quota, the limits,
// the priority) silently dropped. Every key the stack holds in Milner's
// namespace must be one the program reads; the refusal names the nearest
// key it may have meant.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// SecretKeys are the secret config keys the program reads (each set with
// `pulumi config set --secret`, each described in Pulumi.yaml and in
// docs/runbooks/secrets.md). The keys apps map with secretValues are the
// stack's own and known by that mapping.
var SecretKeys = []string{
	ProxmoxTokenKey, ProxmoxSSHKeyKey, KubeconfigKey,
	VaultTLSCertKey, VaultTLSKeyKey, VaultTLSCAKey,
	WoodpeckerAgentSecretKey, WoodpeckerForgeClientKey, WoodpeckerForgeSecretKey,
}

// KeyLister is a ConfigSource that can list its keys: the full key
// (namespace:name) of every value it holds, in any namespace. A source
// that cannot (ok false) is checked key by key as the loader reads it.
type KeyLister interface {
	ConfigKeys() (keys []string, ok bool)
}

// sourceKeys lists the keys of src, sorted: all of them when src lists
// them, else the milner: keys the program reads (of apps: those their
// secretValues map).
func sourceKeys(src ConfigSource, apps []AppConfig) []string {
	if l, ok := src.(KeyLister); ok {
		if keys, ok := l.ConfigKeys(); ok {
			return slices.Sorted(slices.Values(keys))
		}
	}
	var out []string
	for _, k := range slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(Keys), secretKeysOf(apps)...)))) {
		if _, ok := src.GetConfig(Key(k)); ok {
			out = append(out, Key(k))
		}
	}
	slices.Sort(out)
	return out
}

// checkKnownKeys refuses a milner: key the program does not read, naming
// the nearest known key. Known: the structured keys (Keys), the secret
// keys (SecretKeys) and the keys the apps' secretValues map.
func checkKnownKeys(src ConfigSource, apps []AppConfig, p *problems) {
	l, ok := src.(KeyLister)
	if !ok {
		return
	}
	keys, ok := l.ConfigKeys()
	if !ok {
		return
	}
	known := append(slices.Clone(Keys), secretKeysOf(apps)...)
	for _, full := range slices.Sorted(slices.Values(keys)) {
		name, ours := strings.CutPrefix(full, Namespace+":")
		if !ours || slices.Contains(known, name) {
			continue
		}
		p.addf(full, "is not a key Milner reads, so its value would be silently ignored%s; every key is in Pulumi.yaml's config block", nearestKey(name, known))
	}
}

// nearestKey words the known key closest to name (by edit distance, case
// folded), when one is close enough to be a misspelling of it.
func nearestKey(name string, known []string) string {
	best, dist := "", len(name)
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < dist {
			best, dist = k, d
		}
	}
	if best == "" || dist > max(2, len(name)/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", Key(best))
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// EnvKeys lists the keys of a program's config as pulumi-language-go
// passes it in PULUMI_CONFIG (a JSON object of full keys; sdk v3.276.0
// go/pulumi/run.go getEnvInfo reads it so), when every one of them has the
// value get returns: the config of this very run, not a variable left in
// the environment. ok is false otherwise.
func EnvKeys(env string, get func(string) (string, bool)) (keys []string, ok bool) {
	if env == "" {
		return nil, false
	}
	var m map[string]string
	if json.Unmarshal([]byte(env), &m) != nil {
		return nil, false
	}
	for k, v := range m {
		if got, ok := get(k); !ok || got != v {
			return nil, false
		}
		keys = append(keys, k)
	}
	return keys, true
}
