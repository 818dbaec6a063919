package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/milner/milner/internal/mockrun"
)

// sdkModule is the module whose version the pinned CLI must have.
const sdkModule = "github.com/pulumi/pulumi/sdk/v3"

// pinnedCLI is the Pulumi CLI in <repo>/.tools/bin as an auto.PulumiCommand.
// auto.NewPulumiCommand runs `pulumi version` on every Open (about 0.4 s of a
// 1.7 s no-op preview); the version is known without it, because
// scripts/tools.sh builds the CLI from tools/pulumi/go.mod's pin, which must
// equal the SDK version this program links. newCLI checks that equality and
// falls back to auto.NewPulumiCommand when it does not hold.
//
// It also answers, without starting the CLI, the commands the Automation API
// runs only for bookkeeping that Milner never reads (see Run): each start of
// the CLI costs about 0.3 s, and a passphrase stack pays its key derivation
// (about 0.2 s) in every one that opens the stack.
type pinnedCLI struct {
	path    string
	version semver.Version
	// stateDir is the file backend, where Run finds out whether a stack
	// exists without starting the CLI.
	stateDir string
	// resultReads is set when an up, refresh or destroy succeeded, until the
	// Automation API has read the stack's outputs and last history entry
	// for its result (its Up/Refresh/Destroy result, which Stack.run
	// discards: Milner's result comes from the event stream).
	resultReads *atomic.Bool
}

var _ auto.PulumiCommand = pinnedCLI{}

// cliPin matches the CLI's pin in tools/pulumi/go.mod.
var cliPin = regexp.MustCompile(`github\.com/pulumi/pulumi/pkg/v3 v(\S+)`)

// newCLI returns the pinned CLI of repo, for stacks in the file backend
// stateDir.
func newCLI(repo, stateDir string) (auto.PulumiCommand, error) {
	root := filepath.Join(repo, ".tools")
	if v, ok := pinnedVersion(repo); ok {
		return pinnedCLI{path: filepath.Join(root, "bin", "pulumi"), version: v, stateDir: stateDir, resultReads: new(atomic.Bool)}, nil
	}
	return auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: root})
}

// pinnedVersion returns the CLI pin when it equals the linked SDK's version.
func pinnedVersion(repo string) (semver.Version, bool) {
	b, err := os.ReadFile(filepath.Join(repo, "tools", "pulumi", "go.mod"))
	if err != nil {
		return semver.Version{}, false
	}
	m := cliPin.FindSubmatch(b)
	if m == nil || linkedSDK(repo) != "v"+string(m[1]) {
		return semver.Version{}, false
	}
	v, err := semver.Parse(string(m[1]))
	return v, err == nil
}

// sdkRequire matches the SDK's requirement in the repo's go.mod.
var sdkRequire = regexp.MustCompile(`(?m)^\s*github\.com/pulumi/pulumi/sdk/v3 (v\S+)`)

// linkedSDK returns the version of the Pulumi SDK this binary links: from
// its build info, or, when that records no dependencies (a test binary:
// the integration tests), from the go.mod of the repo it was built from.
func linkedSDK(repo string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == sdkModule {
				return dep.Version
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if m := sdkRequire.FindSubmatch(b); err == nil && m != nil {
		return string(m[1])
	}
	return ""
}

// Version is the CLI's version.
func (c pinnedCLI) Version() semver.Version { return c.version }

// Run runs the CLI as auto.NewPulumiCommand's does: non-interactive, the
// CLI's directory (which holds the plugins) first on PATH, and an interrupt,
// not a kill, on cancellation, so the engine can still write its state.
//
// Two kinds of command are answered without the CLI:
//   - `stack select --stack S` of a stack S that exists in the file backend:
//     auto.UpsertStack runs it once per Open only to learn that S exists
//     (every later command names --stack S itself);
//   - right after a successful up, refresh or destroy, the Automation API's
//     reads for its result: `stack output --json` (with and without
//     --show-secrets) and then `stack history --json`. They are answered
//     empty; the history read ends the window, so a caller's own later
//     read of the outputs (Stack.Outputs) runs the CLI as usual.
func (c pinnedCLI) Run(ctx context.Context, workdir string, stdin io.Reader,
	additionalOutput, additionalErrorOutput []io.Writer, additionalEnv []string, args ...string,
) (string, string, int, error) {
	if out, ok := c.answer(args); ok {
		return out, "", 0, nil
	}
	cmd := exec.CommandContext(ctx, c.path, append([]string{"--non-interactive"}, args...)...)
	cmd.Dir = workdir
	cmd.Env = append(os.Environ(), additionalEnv...)
	cmd.Env = append(cmd.Env, "PULUMI_AUTOMATION_API=true",
		"PATH="+filepath.Dir(c.path)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout = io.MultiWriter(append(additionalOutput, &stdout)...)
	cmd.Stderr = io.MultiWriter(append(additionalErrorOutput, &stderr)...)
	cmd.Stdin = stdin
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	c.resultReads.Store(err == nil && len(args) > 0 && (args[0] == "up" || args[0] == "refresh" || args[0] == "destroy"))
	code := -2 // the Automation API's "unknown" code: the CLI did not run
	var exit *exec.ExitError
	switch {
	case err == nil:
		code = 0
	case errors.As(err, &exit):
		code = exit.ExitCode()
	}
	return stdout.String(), stderr.String(), code, err
}

// answer returns the output of a command Run answers without the CLI, and
// whether args is one (see Run).
func (c pinnedCLI) answer(args []string) (string, bool) {
	if len(args) == 4 && args[0] == "stack" && args[1] == "select" && args[2] == "--stack" {
		_, err := os.Stat(filepath.Join(c.stateDir, ".pulumi", "stacks", mockrun.Project, args[3]+".json"))
		return "", err == nil
	}
	if len(args) < 3 || args[0] != "stack" || args[2] != "--json" || !c.resultReads.Load() {
		c.resultReads.Store(false)
		return "", false
	}
	switch args[1] {
	case "output":
		return "{}", true
	case "history":
		c.resultReads.Store(false)
		return "[]", true
	}
	c.resultReads.Store(false)
	return "", false
}
