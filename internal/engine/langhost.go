package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/pulumi/pulumi/pkg/v3/secrets"
	pkgpassphrase "github.com/pulumi/pulumi/pkg/v3/secrets/passphrase"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
)

// programHost serves an inline program to the in-process engine over the
// language runtime protocol, as the Automation API does for the CLI.
type programHost struct {
	address string
	cancel  chan bool
	done    <-chan error
}

// serveProgram starts a language host for program on a loopback port.
func serveProgram(program pulumi.RunFunc) (*programHost, error) {
	cancel := make(chan bool)
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{Cancel: cancel, Init: func(srv *grpc.Server) error {
		pulumirpc.RegisterLanguageRuntimeServer(srv, &languageHost{program: program})
		return nil
	}})
	if err != nil {
		return nil, err
	}
	return &programHost{address: fmt.Sprintf("127.0.0.1:%d", handle.Port), cancel: cancel, done: handle.Done}, nil
}

// ServeProgram serves program as a language runtime on a loopback port,
// as the Automation API serves an inline program: the address is what
// `pulumi preview|up --client <address>` connects the CLI's engine to, in
// place of starting the runtime Pulumi.yaml names. stop shuts it down.
func ServeProgram(program pulumi.RunFunc) (address string, stop func(), err error) {
	h, err := serveProgram(program)
	if err != nil {
		return "", nil, err
	}
	return h.address, h.stop, nil
}

// stop shuts the language host down and waits for it.
func (h *programHost) stop() {
	close(h.cancel)
	<-h.done //nolint:errcheck // the server's own shutdown: the operation's result stands
}

// languageHost runs the program for the engine.
type languageHost struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	program pulumi.RunFunc
}

func (h *languageHost) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	var engineAddress string
	if len(req.Args) > 0 {
		engineAddress = req.Args[0]
	}
	pctx, err := pulumi.NewContext(ctx, pulumi.RunInfo{
		EngineAddr: engineAddress, MonitorAddr: req.GetMonitorAddress(),
		Config: req.GetConfig(), ConfigSecretKeys: req.GetConfigSecretKeys(),
		Project: req.GetProject(), Stack: req.GetStack(), Organization: req.GetOrganization(),
		Parallel: req.GetParallel(), DryRun: req.GetDryRun(),
		// The project directory (where Pulumi.yaml is), for ctx.RootDirectory:
		// the program reads local chart paths from it.
		RootDirectory: req.GetInfo().GetRootDirectory(),
	})
	if err != nil {
		return nil, err
	}
	err = pulumi.RunWithContext(pctx, h.program)
	if cerr := pctx.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// lazyProvider opens the passphrase secrets managers the state names, each
// deriving its key on first use.
type lazyProvider struct{ pass string }

func (p lazyProvider) OfType(_ context.Context, ty string, state json.RawMessage) (secrets.Manager, error) {
	var st struct {
		Salt string `json:"salt"`
	}
	if ty != pkgpassphrase.Type || json.Unmarshal(state, &st) != nil {
		return nil, fmt.Errorf("state secrets provider %q: Milner's stacks use the passphrase provider", ty)
	}
	return lazyPassphrase(p.pass, st.Salt), nil
}

// lazyManager is Pulumi's passphrase secrets manager for one salt, with the
// key derived when a value is first encrypted or decrypted: a stack without
// secrets never pays the derivation.
type lazyManager struct {
	salt string
	open func() (secrets.Manager, error)
}

// lazyPassphrase opens the manager with Pulumi's own passphrase secrets
// manager (pkg/v3 secrets/passphrase GetPassphraseSecretsManager: it checks
// the passphrase against the salt's encrypted word, ErrIncorrectPassphrase
// otherwise), at the cost of one key derivation (PBKDF2, about 0.2 s of
// CPU). Its cache is keyed by salt alone: one passphrase per process.
func lazyPassphrase(pass, salt string) *lazyManager {
	return &lazyManager{salt: salt, open: sync.OnceValues(func() (secrets.Manager, error) {
		sm, err := pkgpassphrase.GetPassphraseSecretsManager(pass, salt)
		if err != nil {
			return nil, fmt.Errorf("stack secrets: %w (%s / %s)", err, PassphraseEnv, PassphraseFileEnv)
		}
		return sm, nil
	})}
}

func (m *lazyManager) Type() string { return pkgpassphrase.Type }
func (m *lazyManager) State() json.RawMessage {
	b, _ := json.Marshal(map[string]string{"salt": m.salt}) //nolint:errcheck // a string map always marshals
	return b
}
func (m *lazyManager) Encrypter() config.Encrypter { return m }
func (m *lazyManager) Decrypter() config.Decrypter { return m }

// lazily runs f on Pulumi's manager, deriving its key first if needed.
func lazily[T any](m *lazyManager, f func(secrets.Manager) (T, error)) (T, error) {
	c, err := m.open()
	if err != nil {
		var zero T
		return zero, err
	}
	return f(c)
}

func (m *lazyManager) EncryptValue(ctx context.Context, v string) (string, error) {
	return lazily(m, func(c secrets.Manager) (string, error) { return c.Encrypter().EncryptValue(ctx, v) })
}

func (m *lazyManager) DecryptValue(ctx context.Context, v string) (string, error) {
	return lazily(m, func(c secrets.Manager) (string, error) { return c.Decrypter().DecryptValue(ctx, v) })
}

func (m *lazyManager) BatchEncrypt(ctx context.Context, vs []string) ([]string, error) {
	return lazily(m, func(c secrets.Manager) ([]string, error) { return c.Encrypter().BatchEncrypt(ctx, vs) })
}

func (m *lazyManager) BatchDecrypt(ctx context.Context, vs []string) ([]string, error) {
	return lazily(m, func(c secrets.Manager) ([]string, error) { return c.Decrypter().BatchDecrypt(ctx, vs) })
}
