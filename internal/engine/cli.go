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
	"time"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// sdkModule is the module whose version the pinned CLI must have.
const sdkModule = "github.com/pulumi/pulumi/sdk/v3"

// pinnedCLI is the Pulumi CLI in <repo>/.tools/bin as an auto.PulumiCommand.
// auto.NewPulumiCommand runs `pulumi version` on every Open (about 0.4 s of a
// 1.7 s no-op preview); the version is known without it, because
// scripts/tools.sh builds the CLI from tools/pulumi/go.mod's pin, which must
// equal the SDK version this program links. newCLI checks that equality and
// falls back to auto.NewPulumiCommand when it does not hold.
type pinnedCLI struct {
	path    string
	version semver.Version
}

var _ auto.PulumiCommand = pinnedCLI{}

// cliPin matches the CLI's pin in tools/pulumi/go.mod.
var cliPin = regexp.MustCompile(`github\.com/pulumi/pulumi/pkg/v3 v(\S+)`)

// newCLI returns the pinned CLI of repo.
func newCLI(repo string) (auto.PulumiCommand, error) {
	root := filepath.Join(repo, ".tools")
	if v, ok := pinnedVersion(repo); ok {
		return pinnedCLI{path: filepath.Join(root, "bin", "pulumi"), version: v}, nil
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
	info, ok := debug.ReadBuildInfo()
	if m == nil || !ok {
		return semver.Version{}, false
	}
	for _, dep := range info.Deps {
		if dep.Path == sdkModule && dep.Version == "v"+string(m[1]) {
			v, err := semver.Parse(string(m[1]))
			return v, err == nil
		}
	}
	return semver.Version{}, false
}

// Version is the CLI's version.
func (c pinnedCLI) Version() semver.Version { return c.version }

// Run runs the CLI as auto.NewPulumiCommand's does: non-interactive, the
// CLI's directory (which holds the plugins) first on PATH, and an interrupt,
// not a kill, on cancellation, so the engine can still write its state.
func (c pinnedCLI) Run(ctx context.Context, workdir string, stdin io.Reader,
	additionalOutput, additionalErrorOutput []io.Writer, additionalEnv []string, args ...string,
) (string, string, int, error) {
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
