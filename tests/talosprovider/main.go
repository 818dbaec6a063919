// Command talosprovider is a test provider plugin (pulumi-resource-talos)
// standing in for the pulumiverse Talos provider's secrets resource,
// talos:machine/secrets:Secrets, which cannot be built on this machine. It
// is built by tests/integration and put first on PATH; no production code
// links it.
//
// It does what terraform-provider-talos v0.10.1 (the provider the
// pulumiverse SDK v0.7.1 bridges) does for talos_machine_secrets, with
// Talos' own machinery:
//   - Create generates a bundle (secrets.NewBundle for the talosVersion
//     contract, as its Create does);
//   - Read of an import id reads the id as the path of a `talosctl gen
//     secrets` YAML file (its ImportState) and records talosVersion v1.3
//     (v1.2 with an AES-CBC secret); Read of a stored resource keeps the
//     state (its Read does nothing);
//   - Update stores the new talosVersion; Delete does nothing (as its own).
//
// Outputs have the provider's shape (secretsBundleTomachineSecrets in
// pkg/talos/util.go): certificates and keys as base64 of their PEM, the
// admin client certificate in clientConfiguration; the id is
// "machine_secrets". Like the provider's Pulumi schema, it marks no output
// secret: what keeps the keys encrypted in state is the program's
// AdditionalSecretOutputs.
package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

const (
	// typeSecrets is the type token of the resource it stands in for.
	typeSecrets = "talos:machine/secrets:Secrets"
	// id is the id the provider gives every secrets resource.
	id = "machine_secrets"
	// version is the pulumiverse Talos SDK's provider version.
	version = "0.7.1"
)

// main serves the provider as a plugin does (the lines of
// sdk/v3/go/pulumi/provider.Main that matter here, without its tracing):
// a gRPC server on a free port, the port on stdout, until the engine's
// SIGINT.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cancel := make(chan bool)
	go func() { <-ctx.Done(); close(cancel) }()
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: cancel,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterResourceProviderServer(srv, &talos{})
			return nil
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type talos struct {
	pulumirpc.UnimplementedResourceProviderServer
}

func (*talos) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version}, nil
}

func (*talos) Configure(context.Context, *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	return &pulumirpc.ConfigureResponse{AcceptSecrets: true, SupportsPreview: true}, nil
}

func (*talos) Check(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	if err := known(req.GetType()); err != nil {
		return nil, err
	}
	if v := talosVersion(req.GetNews()); v != "" {
		if _, err := config.ParseContractFromVersion(v); err != nil {
			return &pulumirpc.CheckResponse{Failures: []*pulumirpc.CheckFailure{{Property: "talosVersion", Reason: err.Error()}}}, nil
		}
	}
	return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
}

func (*talos) Diff(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	if talosVersion(req.GetOldInputs()) == talosVersion(req.GetNews()) {
		return &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_NONE}, nil
	}
	return &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_SOME, Diffs: []string{"talosVersion"}}, nil
}

func (*talos) Create(_ context.Context, req *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	if req.GetPreview() {
		return &pulumirpc.CreateResponse{Properties: req.GetProperties()}, nil
	}
	v := talosVersion(req.GetProperties())
	contract, err := config.ParseContractFromVersion(v)
	if err != nil {
		return nil, fmt.Errorf("talosVersion %q: %w", v, err)
	}
	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		return nil, err
	}
	outs, err := outputs(b, v)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CreateResponse{Id: id, Properties: outs}, nil
}

func (*talos) Read(_ context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	if len(req.GetProperties().GetFields()) > 0 {
		return &pulumirpc.ReadResponse{Id: req.GetId(), Properties: req.GetProperties(), Inputs: req.GetInputs()}, nil
	}
	// An import: the id is the bundle file's path.
	plain, err := os.ReadFile(req.GetId())
	if err != nil {
		return nil, fmt.Errorf("failed to import state: %w", err)
	}
	var b *secrets.Bundle
	if err := yaml.Unmarshal(plain, &b); err != nil {
		return nil, fmt.Errorf("failed to unmarshal machine secrets: %w", err)
	}
	v := "v1.3"
	if b.Secrets.AESCBCEncryptionSecret != "" {
		v = "v1.2"
	}
	outs, err := outputs(b, v)
	if err != nil {
		return nil, err
	}
	ins, err := structpb.NewStruct(map[string]any{"talosVersion": v})
	if err != nil {
		return nil, err
	}
	return &pulumirpc.ReadResponse{Id: id, Properties: outs, Inputs: ins}, nil
}

func (*talos) Update(_ context.Context, req *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	outs := req.GetOlds()
	if outs.GetFields() == nil {
		return nil, fmt.Errorf("%s: no state to update", req.GetUrn())
	}
	outs.Fields["talosVersion"] = structpb.NewStringValue(talosVersion(req.GetNews()))
	return &pulumirpc.UpdateResponse{Properties: outs}, nil
}

func (*talos) Delete(context.Context, *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

// known refuses every type but the one it stands in for.
func known(typ string) error {
	if typ != typeSecrets {
		return fmt.Errorf("test provider: %s is not served (only %s)", typ, typeSecrets)
	}
	return nil
}

func talosVersion(s *structpb.Struct) string { return s.GetFields()["talosVersion"].GetStringValue() }

// outputs are the resource's outputs for bundle b.
func outputs(b *secrets.Bundle, talosVersion string) (*structpb.Struct, error) {
	if b.Clock == nil {
		b.Clock = secrets.NewFixedClock(time.Now())
	}
	in, err := generate.NewInput("", "", "", generate.WithSecretsBundle(b))
	if err != nil {
		return nil, err
	}
	tc, err := in.Talosconfig()
	if err != nil {
		return nil, err
	}
	ctx := tc.Contexts[tc.Context]
	b64 := base64.StdEncoding.EncodeToString
	pair := func(crt, key []byte) map[string]any { return map[string]any{"cert": b64(crt), "key": b64(key)} }
	sec := map[string]any{"bootstrapToken": b.Secrets.BootstrapToken, "secretboxEncryptionSecret": b.Secrets.SecretboxEncryptionSecret}
	if b.Secrets.AESCBCEncryptionSecret != "" {
		sec["aescbcEncryptionSecret"] = b.Secrets.AESCBCEncryptionSecret
	}
	certs := map[string]any{
		"etcd":              pair(b.Certs.Etcd.Crt, b.Certs.Etcd.Key),
		"k8s":               pair(b.Certs.K8s.Crt, b.Certs.K8s.Key),
		"k8sServiceaccount": map[string]any{"key": b64(b.Certs.K8sServiceAccount.Key)},
		"os":                pair(b.Certs.OS.Crt, b.Certs.OS.Key),
	}
	if b.Certs.K8sAggregator != nil && b.Certs.K8sAggregator.Crt != nil {
		certs["k8sAggregator"] = pair(b.Certs.K8sAggregator.Crt, b.Certs.K8sAggregator.Key)
	}
	return structpb.NewStruct(map[string]any{
		"talosVersion": talosVersion,
		"machineSecrets": map[string]any{
			"cluster":    map[string]any{"id": b.Cluster.ID, "secret": b.Cluster.Secret},
			"secrets":    sec,
			"trustdinfo": map[string]any{"token": b.TrustdInfo.Token},
			"certs":      certs,
		},
		"clientConfiguration": map[string]any{"caCertificate": ctx.CA, "clientCertificate": ctx.Crt, "clientKey": ctx.Key},
	})
}
