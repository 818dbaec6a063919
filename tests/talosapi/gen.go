package talosapi

import (
	"fmt"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// Secrets is one cluster's secrets bundle, generating its machine configs
// and talosconfig with machinery's generator (what `talosctl gen config`
// and the provider's talos_machine_configuration run), for tests that do
// not run the provider.
type Secrets struct {
	clusterName, endpoint string
	bundle                *secrets.Bundle
}

// NewSecrets generates a bundle for the v1.9 config contract, the stacks'
// Talos version, for a cluster whose Kubernetes API is at endpoint (e.g.
// https://10.0.0.10:6443).
func NewSecrets(clusterName, endpoint string) (*Secrets, error) {
	b, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersion1_9)
	if err != nil {
		return nil, fmt.Errorf("secrets bundle: %w", err)
	}
	return &Secrets{clusterName: clusterName, endpoint: endpoint, bundle: b}, nil
}

// Config returns a machine config of type t (machine.TypeControlPlane or
// machine.TypeWorker) for Kubernetes kubernetesVersion (e.g. "1.34.1"),
// installing to /dev/vda, with opts added.
func (s *Secrets) Config(t machine.Type, kubernetesVersion string, opts ...generate.Option) ([]byte, error) {
	in, err := s.input(kubernetesVersion, opts...)
	if err != nil {
		return nil, err
	}
	cfg, err := in.Config(t)
	if err != nil {
		return nil, fmt.Errorf("%s config: %w", t, err)
	}
	return cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
}

// Talosconfig returns the cluster's talosconfig (an os:admin client
// certificate) with endpoints.
func (s *Secrets) Talosconfig(endpoints ...string) (*clientconfig.Config, error) {
	in, err := s.input("")
	if err != nil {
		return nil, err
	}
	tc, err := in.Talosconfig()
	if err != nil {
		return nil, fmt.Errorf("talosconfig: %w", err)
	}
	tc.Contexts[tc.Context].Endpoints = endpoints
	return tc, nil
}

// Bundle is the secrets bundle itself.
func (s *Secrets) Bundle() *secrets.Bundle { return s.bundle }

func (s *Secrets) input(kubernetesVersion string, opts ...generate.Option) (*generate.Input, error) {
	if kubernetesVersion == "" {
		kubernetesVersion = constants.DefaultKubernetesVersion
	}
	base := []generate.Option{
		generate.WithSecretsBundle(s.bundle),
		generate.WithVersionContract(config.TalosVersion1_9),
		generate.WithInstallDisk("/dev/vda"),
	}
	in, err := generate.NewInput(s.clusterName, s.endpoint, kubernetesVersion, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("generate input: %w", err)
	}
	return in, nil
}
