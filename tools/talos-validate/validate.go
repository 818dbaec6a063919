// Package validate is the body of Milner's pinned Talos config validators:
// tools/talos-validate-v<version> each link this code with one version of
// Talos' machinery (github.com/siderolabs/talos/pkg/machinery), pinned by
// their go.mod, because one Go build cannot link two. scripts/tools.sh
// builds them into .tools/bin; `milner check` runs them.
//
//	talos-validate-vX version            the machinery version linked
//	talos-validate-vX generate < nodes   generate, patch, validate (JSON in, JSON out)
//	talos-validate-vX validate < nodes   load and validate configs (JSON in, JSON out)
//
// generate is what the provider does (terraform-provider-talos v0.10.1
// pkg/talos/util.go, machineConfigGenerateOptions.generate, on machinery
// v1.12.0): the generator with the provider's default options, the
// stack's contract and a secrets bundle, then the node's patches through
// machinery's patcher. validate is what a node does with a config it is
// sent: machined decodes it with configloader and validates it for its
// runtime mode.
package validate

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/gendata"

	"github.com/milner/milner/tools/talos-validate/wire"
)

// Main runs the command with args (without the program name) and returns
// its exit code: 0 when it could answer (the verdicts are in the output),
// 1 on bad input, 2 on bad usage.
func Main(args []string, in io.Reader, out, errOut io.Writer) int {
	if len(args) != 1 {
		_, _ = fmt.Fprintln(errOut, "usage: talos-validate version|generate|validate < nodes.json")
		return 2
	}
	if args[0] == "version" {
		_, _ = fmt.Fprintln(out, Version())
		return 0
	}
	var nodes []wire.Node
	if err := json.NewDecoder(in).Decode(&nodes); err != nil {
		_, _ = fmt.Fprintf(errOut, "talos-validate: read nodes: %v\n", err)
		return 1
	}
	switch args[0] {
	case "generate":
		generateAll(nodes)
	case "validate":
		for i := range nodes {
			validateOne(&nodes[i])
		}
	default:
		_, _ = fmt.Fprintf(errOut, "talos-validate: unknown command %q\n", args[0])
		return 2
	}
	if err := json.NewEncoder(out).Encode(nodes); err != nil {
		_, _ = fmt.Fprintf(errOut, "talos-validate: %v\n", err)
		return 1
	}
	return 0
}

// Version is the machinery version this binary links.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/siderolabs/talos/pkg/machinery" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// mode is a platform's runtime mode as the validator sees it (talos
// internal/app/machined/pkg/runtime/mode.go: RequiresInstall only for
// metal; nocloud runs in cloud mode; neither in a container).
type mode string

func (m mode) String() string        { return string(m) }
func (m mode) RequiresInstall() bool { return m == "metal" }
func (m mode) InContainer() bool     { return false }

var _ validation.RuntimeMode = mode("metal")

// generateAll generates every node's config, one secrets bundle per
// contract (one per cluster, as the provider's Secrets resource is).
func generateAll(nodes []wire.Node) {
	bundles := map[string]*secrets.Bundle{}
	for i := range nodes {
		n := &nodes[i]
		cfg, err := generateOne(n, bundles)
		if err != nil {
			n.Error = err.Error()
			continue
		}
		b, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
		if err != nil {
			n.Error = fmt.Sprintf("encode: %v", err)
			continue
		}
		n.Config = string(b)
		verdict(n, cfg)
	}
}

func generateOne(n *wire.Node, bundles map[string]*secrets.Bundle) (config.Provider, error) {
	vc, err := config.ParseContractFromVersion(n.Contract)
	if err != nil {
		return nil, fmt.Errorf("contract %q: %w", n.Contract, err)
	}
	if bundles[vc.String()] == nil {
		if bundles[vc.String()], err = secrets.NewBundle(secrets.NewFixedClock(time.Now()), vc); err != nil {
			return nil, fmt.Errorf("secrets: %w", err)
		}
	}
	typ, err := machine.ParseType(n.MachineType)
	if err != nil {
		return nil, err
	}
	// The provider's default options (util.go), then the contract. The
	// provider's WithPersist(true) is machinery's default (v1.12.0
	// options.go DefaultGenOptions, Persist: true) and the option is gone
	// from v1.13, where persist is always on; this code links every
	// validator's machinery, so it leaves the default.
	gen, err := generate.NewInput(n.ClusterName, n.Endpoint, n.KubernetesVersion,
		generate.WithClusterDiscovery(true),
		generate.WithDNSDomain(constants.DefaultDNSDomain),
		generate.WithInstallDisk("/dev/sda"),
		generate.WithInstallImage(fmt.Sprintf("%s/%s/installer:%s", gendata.ImagesRegistry, gendata.ImagesUsername, gendata.VersionTag)),
		generate.WithSecretsBundle(bundles[vc.String()]),
		generate.WithVersionContract(vc),
	)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	base, err := gen.Config(typ)
	if err != nil {
		return nil, fmt.Errorf("generate %s: %w", n.MachineType, err)
	}
	patches, err := configpatcher.LoadPatches(n.Patches)
	if err != nil {
		return nil, fmt.Errorf("load patches: %w", err)
	}
	patched, err := configpatcher.Apply(configpatcher.WithConfig(base), patches)
	if err != nil {
		return nil, fmt.Errorf("apply patches: %w", err)
	}
	return patched.Config()
}

// validateOne loads a config as a node does and validates it.
func validateOne(n *wire.Node) {
	if n.Config == "" {
		n.Error = "no config"
		return
	}
	cfg, err := configloader.NewFromBytes([]byte(n.Config))
	if err != nil {
		n.Refused = fmt.Sprintf("load: %v", err)
		return
	}
	verdict(n, cfg)
}

// verdict validates cfg for the node's platform.
func verdict(n *wire.Node, cfg config.Provider) {
	if n.Platform != "metal" && n.Platform != "nocloud" {
		n.Error = fmt.Sprintf("unknown platform %q", n.Platform)
		return
	}
	warnings, err := cfg.Validate(mode(n.Platform))
	n.Warnings = warnings
	if err != nil {
		n.Refused = err.Error()
	}
}
