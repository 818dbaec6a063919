// Package configtest holds the stack-config fixtures the tests of
// stacks/config and stacks share: a small valid libvirt stack as a stack
// file holds it, its raw values, and a config source over them. Only tests
// import it.
package configtest

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/offlinetest"
)

// Obj is a config object as a stack file holds it.
type Obj = map[string]any

// Base is a small valid libvirt stack: three control planes, one worker,
// one app whose milner:vaultToken secret Raw sets.
func Base() Obj {
	node := func(name, role, addr, mac string) Obj {
		return Obj{"name": name, "role": role, "address": addr, "mac": mac}
	}
	return Obj{
		"cluster":   Obj{"name": "t", "talosVersion": "v1.9.5", "configContract": "v1.9", "kubernetesVersion": "v1.32.3", "vip": "10.9.0.240"},
		"substrate": Obj{"kind": "libvirt", "libvirt": Obj{"domainType": "qemu", "bootImage": "/var/lib/milner/t/boot.qcow2"}},
		"network": Obj{
			"mode": "nat", "cidr": "10.9.0.0/24",
			"dhcpRange": Obj{"start": "10.9.0.100", "end": "10.9.0.199"},
			"vipRange":  Obj{"start": "10.9.0.241", "end": "10.9.0.250"},
		},
		"nodes": []any{
			node("cp-1", "controlplane", "10.9.0.11", "52:54:00:09:00:11"),
			node("cp-2", "controlplane", "10.9.0.12", "52:54:00:09:00:12"),
			node("cp-3", "controlplane", "10.9.0.13", "52:54:00:09:00:13"),
			node("w-1", "worker", "10.9.0.21", "52:54:00:09:00:21"),
		},
		"apps": []any{Obj{
			"name":         "vault",
			"chart":        Obj{"repo": "https://charts.example.org", "name": "demo", "version": "0.29.1"},
			"secretValues": Obj{"server.token": "vaultToken"},
		}},
	}
}

// Raw turns a config object into the raw values the engine passes a
// program, with the secret the base config's app needs while an app maps it
// (a stack file holds no key nothing reads: the loader refuses it).
func Raw(t testing.TB, c Obj) map[string]string {
	t.Helper()
	out, err := offlinetest.RawConfig(c)
	require.NoError(t, err)
	if strings.Contains(out["milner:apps"], `"vaultToken"`) { // mapped by an app's secretValues
		out["milner:vaultToken"] = "t0k3n"
	}
	return out
}

// RawConfig turns a config object into raw values, without secrets.
var RawConfig = offlinetest.RawConfig

// At walks a path of map keys and list indexes into c.
var At = offlinetest.At

// Source is a config.ConfigSource over raw values; the keys listed in
// Secrets are secret, as `pulumi config set --secret` stores them.
type Source struct {
	Values  map[string]string
	Secrets []string
}

var _ config.ConfigSource = Source{}

// GetConfig returns the raw value of a full key.
func (s Source) GetConfig(k string) (string, bool) { v, ok := s.Values[k]; return v, ok }

// ConfigKeys lists every key of Values (config.KeyLister), as a stack file does.
func (s Source) ConfigKeys() ([]string, bool) { return slices.Sorted(maps.Keys(s.Values)), true }

// IsConfigSecret reports whether k is one of Secrets.
func (s Source) IsConfigSecret(k string) bool { return slices.Contains(s.Secrets, k) }

// Load loads raw values with the given secret keys through config.Load.
func Load(raw map[string]string, secrets ...string) (*config.Config, error) {
	return config.Load(Source{Values: raw, Secrets: secrets})
}
