package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/backend/display"
	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	pkgengine "github.com/pulumi/pulumi/pkg/v3/engine"
	"github.com/pulumi/pulumi/pkg/v3/secrets"
	pkgpassphrase "github.com/pulumi/pulumi/pkg/v3/secrets/passphrase"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
)

// previewInProcess previews with the Pulumi engine inside this process
// (the same pkg/v3 release as the pinned CLI) instead of starting the CLI:
// no CLI start (≈ 0.26 s), and the passphrase key is derived only when a
// secret is actually read (≈ 0.2 s otherwise). Same backend, state, config,
// program and plugins as the CLI path; nothing is written (a preview).
func (s *Stack) previewInProcess(ctx context.Context, refresh bool) (*Result, error) {
	settings, err := s.stack.Workspace().StackSettings(ctx, s.Name())
	if err != nil {
		return nil, fmt.Errorf("stack %q: read settings: %w", s.Name(), err)
	}
	// Plugins other than the project's come from PATH, .tools/bin first,
	// and are never fetched online: as for the CLI (see Open's env).
	if path := os.Getenv("PATH"); !strings.HasPrefix(path, s.toolsBin+string(os.PathListSeparator)) {
		if err := os.Setenv("PATH", s.toolsBin+string(os.PathListSeparator)+path); err != nil {
			return nil, err
		}
	}
	const noDownloads = "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"
	if err := os.Setenv(noDownloads, s.env[noDownloads]); err != nil {
		return nil, err
	}
	lang := &languageHost{program: s.program}
	cancel := make(chan bool)
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{Cancel: cancel, Init: func(srv *grpc.Server) error {
		pulumirpc.RegisterLanguageRuntimeServer(srv, lang)
		return nil
	}})
	if err != nil {
		return nil, fmt.Errorf("stack %q: language host: %w", s.Name(), err)
	}
	defer func() {
		close(cancel)
		<-handle.Done //nolint:errcheck // the server's own shutdown: the preview's result stands
	}()
	project := s.project
	project.Runtime = workspace.NewProjectRuntimeInfo("client", map[string]any{"address": fmt.Sprintf("127.0.0.1:%d", handle.Port)})

	b, err := diy.New(ctx, cmdutil.Diag(), "file://"+s.stateDir, &project)
	if err != nil {
		return nil, fmt.Errorf("stack %q: backend: %w", s.Name(), err)
	}
	ref, err := b.ParseStackReference(s.Name())
	if err != nil {
		return nil, fmt.Errorf("stack %q: %w", s.Name(), err)
	}
	stack, err := b.GetStack(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("stack %q: %w", s.Name(), err)
	}
	sm := lazyPassphrase(s.pass, settings.EncryptionSalt)
	op := backend.UpdateOperation{
		Proj: &project, Root: s.stack.Workspace().WorkDir(),
		M: &backend.UpdateMetadata{Environment: map[string]string{}},
		Opts: backend.UpdateOptions{
			// The CLI's default --parallel (4 × GOMAXPROCS) and the
			// parallel diffs Open's environment gives the CLI.
			Engine: pkgengine.UpdateOptions{
				Parallel: 4 * int32(runtime.GOMAXPROCS(0)), ParallelDiff: s.env["PULUMI_PARALLEL_DIFF"] == "true", Refresh: refresh,
			},
			Display: display.Options{
				Color: colors.Never, Type: display.DisplayProgress, SuppressPermalink: true,
				Stdout: s.progress, Stderr: s.progress,
			},
		},
		StackConfiguration: backend.StackConfiguration{Config: settings.Config, Decrypter: sm.Decrypter()},
		SecretsManager:     sm,
		SecretsProvider:    lazyProvider{pass: s.pass},
		Scopes:             backend.CancellationScopes,
	}
	return s.run(ctx, "preview", func(ch chan<- events.EngineEvent) error {
		defer close(ch)
		engineEvents := make(chan pkgengine.Event)
		done := make(chan struct{})
		var diags []string // the engine's error diagnostics, which the CLI prints on stderr
		go func() {
			defer close(done)
			for e := range engineEvents {
				ev, err := display.ConvertEngineEvent(e, false)
				if err != nil {
					continue
				}
				if d := ev.DiagnosticEvent; d != nil && d.Severity == "error" {
					diags = append(diags, strings.TrimSpace(colors.Never.Colorize(d.Message)))
				}
				ch <- events.EngineEvent{EngineEvent: ev}
			}
		}()
		_, _, err := backend.PreviewStack(ctx, stack, op, engineEvents)
		close(engineEvents)
		<-done
		if err != nil && len(diags) > 0 {
			return fmt.Errorf("%w: %s", err, strings.Join(diags, "; "))
		}
		return err
	})
}

// languageHost serves the inline program to the in-process engine, as the
// Automation API does for the CLI.
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
		return nil, fmt.Errorf("state secrets provider %q: Milner's state uses the passphrase provider", ty)
	}
	return lazyPassphrase(p.pass, st.Salt), nil
}

// lazyManager is Pulumi's passphrase secrets manager for one salt, with the
// key derived when a value is first encrypted or decrypted.
type lazyManager struct {
	salt string
	open func() (config.Crypter, error)
}

func lazyPassphrase(pass, salt string) *lazyManager {
	return &lazyManager{salt: salt, open: sync.OnceValues(func() (config.Crypter, error) { return crypter(pass, salt) })}
}

func (m *lazyManager) Type() string { return pkgpassphrase.Type }
func (m *lazyManager) State() json.RawMessage {
	b, _ := json.Marshal(map[string]string{"salt": m.salt}) //nolint:errcheck // a string map always marshals
	return b
}
func (m *lazyManager) Encrypter() config.Encrypter { return m }
func (m *lazyManager) Decrypter() config.Decrypter { return m }

func (m *lazyManager) EncryptValue(ctx context.Context, v string) (string, error) {
	c, err := m.open()
	if err != nil {
		return "", err
	}
	return c.EncryptValue(ctx, v)
}

func (m *lazyManager) DecryptValue(ctx context.Context, v string) (string, error) {
	c, err := m.open()
	if err != nil {
		return "", err
	}
	return c.DecryptValue(ctx, v)
}

func (m *lazyManager) BatchEncrypt(ctx context.Context, vs []string) ([]string, error) {
	c, err := m.open()
	if err != nil {
		return nil, err
	}
	return c.BatchEncrypt(ctx, vs)
}

func (m *lazyManager) BatchDecrypt(ctx context.Context, vs []string) ([]string, error) {
	c, err := m.open()
	if err != nil {
		return nil, err
	}
	return c.BatchDecrypt(ctx, vs)
}
