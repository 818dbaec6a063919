package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/talosconfig"
)

// The node configs rendered in this process with Talos' own machinery
// (github.com/siderolabs/talos/pkg/machinery, the module's v1.11.5): the
// generator for the cluster's config contract, Milner's patches through
// machinery's config patcher, and the validator for the platform the node
// boots. No Talos provider plugin runs here; this is the same generator,
// patcher and validator the provider and talosctl use. (`milner check`
// validates at the provider's and the nodes' machinery versions with the
// tools/talos-validate-* builds instead.)

// talosMode is a platform's runtime mode, the validator's view of it.
// Upstream (talos v1.11.5 internal/app/machined/pkg/runtime/mode.go):
// RequiresInstall is true for ModeMetal only; InContainer for
// ModeContainer only; the nocloud platform runs in ModeCloud
// (platform/nocloud/nocloud.go).
type talosMode talosconfig.Platform

var _ validation.RuntimeMode = talosMode(talosconfig.Metal)

func (m talosMode) String() string        { return string(m) }
func (m talosMode) RequiresInstall() bool { return talosconfig.Platform(m) == talosconfig.Metal }
func (m talosMode) InContainer() bool     { return false }

// talosSecrets is a generated secrets bundle for a config contract, made
// once and shared by the nodes of one cluster (as the provider's Secrets
// resource is).
type talosSecrets struct {
	contract *config.VersionContract
	bundle   *secrets.Bundle
}

func newTalosSecrets(t *testing.T, contract string) *talosSecrets {
	t.Helper()
	vc, err := config.ParseContractFromVersion(contract)
	require.NoError(t, err, "contract %q", contract)
	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), vc)
	require.NoError(t, err, "contract %q: secrets", contract)
	return &talosSecrets{contract: vc, bundle: b}
}

// renderTalos generates the node's config with machinery, applies its
// patches through machinery's patcher, and returns it with the validator's
// warnings. The error lists every problem Talos finds.
func renderTalos(s *talosSecrets, in talosconfig.Input) (config.Provider, []string, error) {
	vc, err := config.ParseContractFromVersion(in.Contract)
	if err != nil {
		return nil, nil, fmt.Errorf("contract %q: %w", in.Contract, err)
	}
	if s.contract.String() != vc.String() {
		return nil, nil, fmt.Errorf("secrets are for contract %s, the node's is %s", s.contract, vc)
	}
	typ, err := machine.ParseType(in.MachineType)
	if err != nil {
		return nil, nil, err
	}
	if in.Platform != talosconfig.Metal && in.Platform != talosconfig.Nocloud {
		return nil, nil, fmt.Errorf("unknown platform %q", in.Platform)
	}
	gen, err := generate.NewInput(in.ClusterName, in.Endpoint, in.KubernetesVersion,
		generate.WithVersionContract(vc),
		generate.WithSecretsBundle(s.bundle),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("generate: %w", err)
	}
	base, err := gen.Config(typ)
	if err != nil {
		return nil, nil, fmt.Errorf("generate %s: %w", in.MachineType, err)
	}
	patches, err := configpatcher.LoadPatches(in.Patches)
	if err != nil {
		return nil, nil, fmt.Errorf("load patches: %w", err)
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(base), patches)
	if err != nil {
		return nil, nil, fmt.Errorf("apply patches: %w", err)
	}
	cfg, err := out.Config()
	if err != nil {
		return nil, nil, fmt.Errorf("patched config: %w", err)
	}
	warnings, err := cfg.Validate(talosMode(in.Platform))
	if err != nil {
		return cfg, warnings, fmt.Errorf("validate for %s: %w", in.Platform, err)
	}
	return cfg, warnings, nil
}

// validateTalos is renderTalos for its verdict only.
func validateTalos(s *talosSecrets, in talosconfig.Input) error {
	_, _, err := renderTalos(s, in)
	return err
}

// renderNode is a control plane's input with a patch shaped like Milner's.
func renderNode(patches ...string) talosconfig.Input {
	return talosconfig.Input{
		ClusterName: "t", Endpoint: "https://10.73.0.240:6443", KubernetesVersion: "v1.32.3",
		Contract: "v1.9", MachineType: "controlplane", Platform: talosconfig.Metal,
		Patches: append([]string{`{"machine":{"install":{"disk":"/dev/vda"},"network":{"hostname":"cp-1","interfaces":[{"deviceSelector":{"hardwareAddr":"52:54:00:73:00:11"},"addresses":["10.73.0.11/24"],"vip":{"ip":"10.73.0.240"}}]}}}`}, patches...),
	}
}

func TestValidPatchPasses(t *testing.T) {
	assert.NoError(t, validateTalos(newTalosSecrets(t, "v1.9"), renderNode()))
}

// TestBrokenPatchesAreCaught shows what Talos' own validator refuses in a
// patch that the provider would only refuse on a live node.
func TestBrokenPatchesAreCaught(t *testing.T) {
	s := newTalosSecrets(t, "v1.9")
	for name, tc := range map[string]struct{ patch, want string }{
		"vip not an address": {`{"machine":{"network":{"interfaces":[{"deviceSelector":{"hardwareAddr":"52:54:00:73:00:11"},"vip":{"ip":"10.73.0.x"}}]}}}`, "vip"},
		"unknown field":      {`{"machine":{"instal":{"disk":"/dev/vda"}}}`, "instal"},
	} {
		t.Run(name, func(t *testing.T) {
			err := validateTalos(s, renderNode(tc.patch))
			require.Error(t, err)
			t.Log(err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestMetalNeedsAnInstallDiskNocloudDoesNot(t *testing.T) {
	s := newTalosSecrets(t, "v1.9")
	in := renderNode()
	in.Patches = []string{`{"machine":{"network":{"hostname":"cp-1"}}}`}
	assert.Error(t, validateTalos(s, in), "metal installs to disk")
	in.Platform = talosconfig.Nocloud
	assert.NoError(t, validateTalos(s, in), "nocloud boots the installed image")
}
