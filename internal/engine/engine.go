// Package engine runs the Milner program on the real Pulumi engine through
// the Automation API: an inline program (stacks.Program, so no language
// plugin), the pinned CLI and libvirt plugin from <repo>/.tools/bin, and a
// local file backend. Previews run the same engine release (pkg/v3, pinned
// equal to the CLI) inside this process, which spares the CLI's start and
// the passphrase key derivation when no secret is read (inproc.go). Pulumi's
// own progress is shown as it runs; every operation also returns the
// engine's events, so callers (the milner command, the integration tests)
// can assert on the steps the engine planned or took.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/internal/mockrun"
	"github.com/milner/milner/stacks"
)

// LibvirtPluginVersion is the plugin version scripts/tools.sh stamps into
// pulumi-resource-libvirt; it must match the pulumi-libvirt SDK in go.mod,
// because the SDK asks the engine for exactly that version.
const LibvirtPluginVersion = "0.5.4"

// PassphraseEnv names the environment variable holding the passphrase that
// encrypts a stack's secrets in the file backend.
const PassphraseEnv = "MILNER_PASSPHRASE"

// LocalStack is the stack the main-job command brings up on this machine.
const LocalStack = "local"

// DefaultLocalPassphrase is the passphrase of the local stack when
// MILNER_PASSPHRASE is unset. The local stack holds no secrets (it stops
// after the substrate layer on an isolated network), so a documented default
// costs nothing there; every other stack must set MILNER_PASSPHRASE.
const DefaultLocalPassphrase = "milner-local"

// DefaultStateDir is the file backend of a repo, relative to its root
// (git-ignored through /.pulumi/).
const DefaultStateDir = ".pulumi/state"

// Options says which stack to open and where.
type Options struct {
	// Stack is the stack name.
	Stack string
	// Repo is the repository root: it holds .tools/bin and Pulumi.<stack>.yaml.
	Repo string
	// StateDir is the file backend directory (created if missing); default
	// <Repo>/.pulumi/state. The Automation API's work directory (its copy of
	// the project and stack settings, with the passphrase salt) lives in it too.
	StateDir string
	// ConfigFile is the stack file whose config block the stack gets; default
	// <Repo>/Pulumi.<Stack>.yaml. Its encrypted (secure:) values are
	// decrypted by the CLI with the same passphrase and set again as secrets.
	ConfigFile string
	// Overrides replace values of ConfigFile by full key (milner:nodes), raw
	// as the program reads them: strings as they are, objects as JSON.
	Overrides map[string]string
	// Passphrase overrides MILNER_PASSPHRASE.
	Passphrase string
	// Program is the Pulumi program; default stacks.Program.
	Program pulumi.RunFunc
	// Progress receives Pulumi's own progress output; default os.Stdout.
	// io.Discard silences it.
	Progress io.Writer
}

// Stack is an opened stack on the file backend.
type Stack struct {
	stack    auto.Stack
	env      map[string]string
	progress io.Writer
	config   map[string]string
	// secure are the stack file's secrets, encrypted for the workspace
	// stack (setSecrets); SetConfig writes them along with config.
	secure map[config.Key]string
	// salt, when set, is the encryption salt SetConfig gives a workspace
	// stack file that has none.
	salt string
	// What the in-process preview needs besides the workspace.
	stateDir, toolsBin, pass string
	program                  pulumi.RunFunc
	project                  workspace.Project
}

// Open creates or selects the stack and sets its config from the stack file
// and overrides. It runs no operation.
func Open(ctx context.Context, o Options) (*Stack, error) {
	if o.Stack == "" || o.Repo == "" {
		return nil, errors.New("engine: stack and repo are required")
	}
	if err := ValidStackName(o.Stack); err != nil {
		return nil, err
	}
	// The CLI runs in the work directory: every path it is given is absolute.
	var err error
	if o.Repo, err = filepath.Abs(o.Repo); err != nil {
		return nil, fmt.Errorf("stack %q: %w", o.Stack, err)
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join(o.Repo, DefaultStateDir)
	}
	if o.StateDir, err = filepath.Abs(o.StateDir); err != nil {
		return nil, fmt.Errorf("stack %q: %w", o.Stack, err)
	}
	if o.ConfigFile == "" {
		o.ConfigFile = filepath.Join(o.Repo, "Pulumi."+o.Stack+".yaml")
	}
	if o.Program == nil {
		o.Program = stacks.Program
	}
	if o.Progress == nil {
		o.Progress = os.Stdout
	}
	cfg, err := mockrun.ReadStackConfig(o.ConfigFile)
	if err != nil {
		return nil, fmt.Errorf("stack %q: read config: %w", o.Stack, err)
	}
	maps.Copy(cfg, o.Overrides)
	pass, err := passphrase(o, cfg)
	if err != nil {
		return nil, err
	}
	if err := PrivateDir(o.StateDir); err != nil {
		return nil, fmt.Errorf("stack %q: %w", o.Stack, err)
	}

	// The work directory must not be the repo: the Automation API writes its
	// own Pulumi.yaml and Pulumi.<stack>.yaml there.
	work := filepath.Join(o.StateDir, "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, fmt.Errorf("stack %q: %w", o.Stack, err)
	}
	toolsBin := filepath.Join(o.Repo, ".tools", "bin")
	cmd, err := newCLI(o.Repo, o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("stack %q: pulumi CLI in %s (run scripts/tools.sh): %w", o.Stack, toolsBin, err)
	}
	env := map[string]string{
		"PULUMI_BACKEND_URL":       "file://" + o.StateDir,
		"PULUMI_CONFIG_PASSPHRASE": pass,
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		// Plugins come only from .tools/bin; never look for them online.
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
		// Update plans (preview --save-plan, up --plan) are still behind
		// the experimental flag; milner up applies nothing but the plan.
		"PULUMI_EXPERIMENTAL": "true",
		// Diff resources concurrently instead of one after another: the
		// bridged libvirt provider spends ~15 ms of CPU on each domain's
		// Diff, so a no-op preview of 30 nodes drops from 2.27 s to 1.75 s
		// on this 2-core machine (BENCHMARKS.md). The steps and their order
		// of execution are unchanged; upstream covers it in its lifecycle
		// tests (TestParallelDiff, delete-before-replace included).
		"PULUMI_PARALLEL_DIFF": "true",
	}
	project := workspace.Project{
		Name:    tokens.PackageName(mockrun.Project),
		Runtime: workspace.NewProjectRuntimeInfo("go", nil),
		Plugins: &workspace.Plugins{Providers: []workspace.PluginOptions{
			{Name: "libvirt", Version: LibvirtPluginVersion, Path: toolsBin},
		}},
	}
	secrets, err := readSecrets(o, pass, &project)
	if err != nil {
		return nil, err
	}
	st, err := auto.UpsertStackInlineSource(ctx, o.Stack, mockrun.Project, o.Program,
		auto.Pulumi(cmd), auto.WorkDir(work), auto.EnvVars(env), auto.Project(project))
	if err != nil {
		return nil, fmt.Errorf("stack %q: open: %w", o.Stack, err)
	}
	s := &Stack{stack: st, env: env, progress: o.Progress,
		stateDir: o.StateDir, toolsBin: toolsBin, pass: pass, program: o.Program, project: project}
	if err := s.setSecrets(ctx, secrets, pass); err != nil {
		return nil, err
	}
	if err := s.SetConfig(ctx, cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// passphrase picks the stack's passphrase: Options, then MILNER_PASSPHRASE,
// then the local stack's documented default, which only a stack holding no
// secret and stopping after the substrate may use (cfg is its config).
func passphrase(o Options, cfg map[string]string) (string, error) {
	switch {
	case o.Passphrase != "":
		return o.Passphrase, nil
	case os.Getenv(PassphraseEnv) != "":
		return os.Getenv(PassphraseEnv), nil
	}
	if err := defaultPassphraseAllowed(o.Stack, o.ConfigFile, cfg); err != nil {
		return "", fmt.Errorf("stack %q: set %s (%w)", o.Stack, PassphraseEnv, err)
	}
	return DefaultLocalPassphrase, nil
}

// Name is the stack name.
func (s *Stack) Name() string { return s.stack.Name() }

// Config returns a copy of the stack's current config (full key → raw value).
func (s *Stack) Config() map[string]string { return maps.Clone(s.config) }

// SetConfig replaces the stack's whole config (full key → raw value, objects
// as JSON; values are stored as plain strings, which is what stacks.Load
// decodes), keeping the stack file's secrets. It writes the workspace's
// stack settings directly, keeping the passphrase salt, instead of running
// `pulumi config set` once per key.
func (s *Stack) SetConfig(ctx context.Context, cfg map[string]string) error {
	ws := s.stack.Workspace()
	settings, err := ws.StackSettings(ctx, s.Name())
	if err != nil {
		return fmt.Errorf("stack %q: read settings: %w", s.Name(), err)
	}
	settings.Config = config.Map{}
	for k, v := range cfg {
		key, err := config.ParseKey(k)
		if err != nil {
			return fmt.Errorf("stack %q: config key %q: %w", s.Name(), k, err)
		}
		settings.Config[key] = config.NewValue(v)
	}
	for key, ciphertext := range s.secure {
		settings.Config[key] = config.NewSecureValue(ciphertext)
	}
	if settings.EncryptionSalt == "" {
		settings.EncryptionSalt = s.salt
	}
	if err := ws.SaveStackSettings(ctx, s.Name(), settings); err != nil {
		return fmt.Errorf("stack %q: save settings: %w", s.Name(), err)
	}
	s.config = maps.Clone(cfg)
	return nil
}

// Result is what one operation did (or, for a preview, would do).
type Result struct {
	// Steps are the engine's resource steps in the order it reported them,
	// including "same" steps.
	Steps []Step
	// Summary counts resources per operation ("same", "create", "replace", ...).
	Summary map[string]int
	// Events are every engine event, for assertions Steps does not cover.
	Events []events.EngineEvent
}

// Step is one resource step of the engine.
type Step struct {
	// Op is the engine's operation: same, create, update, replace,
	// create-replacement, delete-replaced, delete, import, refresh, read, ...
	Op string
	// URN is the resource's URN.
	URN string
	// Type is the resource's type token.
	Type string
	// Keys are the inputs that force a replace.
	Keys []string
	// Diffs are the inputs that differ.
	Diffs []string
	// Failed is set when the engine reported the step as failed.
	Failed bool
}

// Name is the logical name of the step's resource (the URN's last segment).
func (s Step) Name() string { return s.URN[strings.LastIndex(s.URN, "::")+2:] }

// Changes returns the steps that change something: every step but "same"
// and the reads a refresh does of unchanged resources.
func (r *Result) Changes() []Step {
	var out []Step
	for _, st := range r.Steps {
		if st.Op == string(apitype.OpSame) || (st.Op == string(apitype.OpRefresh) && len(st.Diffs) == 0) {
			continue
		}
		out = append(out, st)
	}
	return out
}

// Preview runs a preview; with refresh it first reads every resource back
// from the provider (preview --refresh). It runs the engine in this process
// (previewInProcess): the same engine release as the CLI, without its start.
func (s *Stack) Preview(ctx context.Context, refresh bool) (*Result, error) {
	return s.previewInProcess(ctx, refresh)
}

// PlanOptions configure a preview whose plan an up then applies.
type PlanOptions struct {
	// Replace are URNs the engine replaces even though nothing changed
	// (the node VMs named with `milner up --replace`).
	Replace []string
	// PlanFile is where the preview saves its update plan; UpPlan applies
	// that plan, and the engine fails the up if it would do anything the
	// preview did not show.
	PlanFile string
}

// PreviewPlan previews and saves the update plan to o.PlanFile.
func (s *Stack) PreviewPlan(ctx context.Context, o PlanOptions) (*Result, error) {
	return s.run(ctx, "preview", func(ch chan<- events.EngineEvent) error {
		_, err := s.stack.Preview(ctx, optpreview.ProgressStreams(s.progress), optpreview.EventStreams(ch),
			optpreview.Replace(o.Replace), optpreview.Plan(o.PlanFile))
		return err
	})
}

// UpPlan applies exactly the plan PreviewPlan saved.
func (s *Stack) UpPlan(ctx context.Context, o PlanOptions) (*Result, error) {
	return s.run(ctx, "up", func(ch chan<- events.EngineEvent) error {
		_, err := s.stack.Up(ctx, optup.ProgressStreams(s.progress), optup.EventStreams(ch),
			optup.Replace(o.Replace), optup.Plan(o.PlanFile))
		return err
	})
}

// Up applies the program: creates, updates, replaces and deletes until the
// stack matches it.
func (s *Stack) Up(ctx context.Context) (*Result, error) {
	return s.run(ctx, "up", func(ch chan<- events.EngineEvent) error {
		_, err := s.stack.Up(ctx, optup.ProgressStreams(s.progress), optup.EventStreams(ch))
		return err
	})
}

// Refresh reads every resource back from its provider into state.
func (s *Stack) Refresh(ctx context.Context) (*Result, error) {
	return s.run(ctx, "refresh", func(ch chan<- events.EngineEvent) error {
		_, err := s.stack.Refresh(ctx, optrefresh.ProgressStreams(s.progress), optrefresh.EventStreams(ch))
		return err
	})
}

// Destroy deletes every resource of the stack. The engine refuses to delete
// protected ones (and says so in the error); the rest are deleted.
func (s *Stack) Destroy(ctx context.Context) (*Result, error) {
	return s.run(ctx, "destroy", func(ch chan<- events.EngineEvent) error {
		_, err := s.stack.Destroy(ctx, optdestroy.ProgressStreams(s.progress), optdestroy.EventStreams(ch), optdestroy.ContinueOnError())
		return err
	})
}

// UnprotectAll clears the protect flag of every resource in state
// (`pulumi state unprotect --all`): the deliberate step before a destroy
// that is meant to delete disks too, such as a test's cleanup.
func (s *Stack) UnprotectAll(ctx context.Context) error {
	_, stderr, _, err := s.cli(ctx, "state", "unprotect", "--all", "--yes", "--stack", s.Name())
	if err != nil {
		return fmt.Errorf("stack %q: unprotect: %w: %s", s.Name(), err, stderr)
	}
	return nil
}

// cli runs one Pulumi CLI command in the stack's workspace and environment.
func (s *Stack) cli(ctx context.Context, args ...string) (string, string, int, error) {
	env := make([]string, 0, len(s.env))
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	ws := s.stack.Workspace()
	return ws.PulumiCommand().Run(ctx, ws.WorkDir(), nil, nil, nil, env, args...)
}

// run runs one operation while collecting its engine events. The error of a
// failed operation carries the engine's own message (e.g. the protect error).
func (s *Stack) run(ctx context.Context, op string, do func(chan<- events.EngineEvent) error) (*Result, error) {
	ch := make(chan events.EngineEvent)
	done := make(chan *Result)
	go func() {
		r := &Result{Summary: map[string]int{}}
		for ev := range ch {
			r.Events = append(r.Events, ev)
			r.add(ev)
		}
		done <- r
	}()
	err := do(ch) // the Automation API closes ch when the operation ends
	r := <-done
	if err != nil {
		return r, fmt.Errorf("stack %q: %s: %w", s.Name(), op, err)
	}
	return r, nil
}

// add folds one engine event into the result.
func (r *Result) add(ev events.EngineEvent) {
	switch {
	case ev.ResourcePreEvent != nil:
		m := ev.ResourcePreEvent.Metadata
		r.Steps = append(r.Steps, Step{Op: string(m.Op), URN: m.URN, Type: m.Type, Keys: m.Keys, Diffs: m.Diffs})
	case ev.ResOpFailedEvent != nil:
		m := ev.ResOpFailedEvent.Metadata
		for i := len(r.Steps) - 1; i >= 0; i-- {
			if r.Steps[i].URN == m.URN && r.Steps[i].Op == string(m.Op) {
				r.Steps[i].Failed = true
				return
			}
		}
		r.Steps = append(r.Steps, Step{Op: string(m.Op), URN: m.URN, Type: m.Type, Keys: m.Keys, Diffs: m.Diffs, Failed: true})
	case ev.SummaryEvent != nil:
		for op, n := range ev.SummaryEvent.ResourceChanges {
			r.Summary[string(op)] = n
		}
	}
}

// Resource is one resource as the stack's state records it.
type Resource struct {
	// URN is the resource's URN.
	URN string
	// Type is the resource's type token.
	Type string
	// ID is the provider's id (libvirt UUID or volume key); "" for components.
	ID string
	// Protect reports the protect flag.
	Protect bool
}

// Resources returns every resource in the stack's state, in state order.
func (s *Stack) Resources(ctx context.Context) ([]Resource, error) {
	dep, err := s.stack.Export(ctx)
	if err != nil {
		return nil, fmt.Errorf("stack %q: export: %w", s.Name(), err)
	}
	var state apitype.DeploymentV3
	if err := json.Unmarshal(dep.Deployment, &state); err != nil {
		return nil, fmt.Errorf("stack %q: decode state: %w", s.Name(), err)
	}
	out := make([]Resource, 0, len(state.Resources))
	for _, r := range state.Resources {
		out = append(out, Resource{URN: string(r.URN), Type: string(r.Type), ID: string(r.ID), Protect: r.Protect})
	}
	return out, nil
}

// Outputs returns the stack's outputs, secrets in the clear, from one read
// of its state (`pulumi stack output --json --show-secrets`: one CLI start,
// where the Automation API's Stack.Outputs takes two).
func (s *Stack) Outputs(ctx context.Context) (map[string]any, error) {
	out, stderr, _, err := s.cli(ctx, "stack", "output", "--json", "--show-secrets", "--stack", s.Name())
	if err != nil {
		return nil, fmt.Errorf("stack %q: outputs: %w: %s", s.Name(), err, stderr)
	}
	outs := map[string]any{}
	if err := json.Unmarshal([]byte(out), &outs); err != nil {
		return nil, fmt.Errorf("stack %q: decode outputs: %w", s.Name(), err)
	}
	return outs, nil
}
