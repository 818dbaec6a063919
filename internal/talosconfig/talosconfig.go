// Package talosconfig checks Milner's Talos machine configurations with
// Talos' own code (github.com/siderolabs/talos/pkg/machinery): it generates
// a node's config for the cluster's config contract, applies Milner's patches
// through machinery's config patcher, and validates the result for the
// platform the node boots (metal for libvirt, nocloud for Proxmox). No Talos
// provider plugin runs here; this is the same generator, patcher and
// validator the provider and talosctl use.
package talosconfig

import (
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
)

// Platform is the Talos platform a node boots, as its runtime mode sees it.
type Platform string

// The platforms Milner's substrates boot.
const (
	// Metal is the libvirt boot image (metal-amd64): Talos installs to disk.
	Metal Platform = "metal"
	// Nocloud is the Proxmox boot image (nocloud-amd64): a cloud platform,
	// the image is the installed system.
	Nocloud Platform = "nocloud"
)

// mode is a platform's runtime mode, the validator's view of it. Upstream
// (talos v1.11.5 internal/app/machined/pkg/runtime/mode.go): RequiresInstall
// is true for ModeMetal only; InContainer for ModeContainer only; the nocloud
// platform runs in ModeCloud (platform/nocloud/nocloud.go).
type mode Platform

var _ validation.RuntimeMode = mode(Metal)

func (m mode) String() string        { return string(m) }
func (m mode) RequiresInstall() bool { return Platform(m) == Metal }
func (m mode) InContainer() bool     { return false }

// Input is one node's config, as the program asks the provider for it.
type Input struct {
	// ClusterName, Endpoint and KubernetesVersion are the generator's inputs.
	ClusterName, Endpoint, KubernetesVersion string
	// Contract is the config contract (the generator's talos_version), e.g. v1.9.
	Contract string
	// MachineType is controlplane or worker.
	MachineType string
	// Patches are the node's patches in order (its own, then extra ones).
	Patches []string
	// Platform is the platform the node boots.
	Platform Platform
}

// Secrets is a generated secrets bundle, made once and shared by the nodes
// of one cluster (as the provider's Secrets resource is).
type Secrets struct {
	contract *config.VersionContract
	bundle   *secrets.Bundle
}

// NewSecrets generates a secrets bundle for a config contract.
func NewSecrets(contract string) (*Secrets, error) {
	vc, err := config.ParseContractFromVersion(contract)
	if err != nil {
		return nil, fmt.Errorf("contract %q: %w", contract, err)
	}
	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), vc)
	if err != nil {
		return nil, fmt.Errorf("contract %q: secrets: %w", contract, err)
	}
	return &Secrets{contract: vc, bundle: b}, nil
}

// Render generates the node's config with machinery, applies its patches
// through machinery's patcher, and returns it with the validator's warnings.
// The error lists every problem Talos finds.
func Render(s *Secrets, in Input) (config.Provider, []string, error) {
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
	if in.Platform != Metal && in.Platform != Nocloud {
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
	warnings, err := cfg.Validate(mode(in.Platform))
	if err != nil {
		return cfg, warnings, fmt.Errorf("validate for %s: %w", in.Platform, err)
	}
	return cfg, warnings, nil
}

// Validate is Render for its verdict only.
func Validate(s *Secrets, in Input) error {
	_, _, err := Render(s, in)
	return err
}
