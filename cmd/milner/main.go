// Command milner runs the Milner program on the Pulumi engine and turns the
// seeds' shipping rules into commands that cannot be skipped by accident:
// a gated up, node replacement, adoption, a confirmed full teardown, and
// the client configs, status and docs of a stack. It works on the same
// project, stack files, backend and passphrase as the user's `pulumi`.
//
// Exit codes: see exitCodes, the one place they are documented.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/milner/milner/internal/clientfiles"
	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/internal/redact"
)

// exitCodes is the root help's (and so docs/cli.md's) one description of
// the exit codes (pipeline.ExitCode); run picks the code by the error's
// type, never its text.
const exitCodes = `Exit codes, the same for every verb, as Pulumi's (pkg/cmd/pulumi exit
codes): 0 ok; 1 error; 2 usage (a flag, argument or verb milner does not
take, a required flag missing, a confirmation with neither a terminal nor
--yes, or with --non-interactive and no --yes); 5 refused by a rule (Pulumi's policy violation), nothing was
changed; 6 no stack given or selected; 7 changes pending or drift (--expect-no-changes, docs --check); 8 cancelled: a
declined confirmation, or an interrupt (the first SIGINT, SIGTERM or
SIGHUP cancels gracefully: the steps in flight finish, the state is saved,
every lock is released; a second one terminates). Pulumi's 3
(authentication), 4 (resource), 9 (timeout) and 10 (await) are not used:
a failed step is 1, as in Pulumi.`

// jsonOutput is the root help's (and so docs/cli.md's) one description of
// --json (emit, failure, pipeline.Outcome).
const jsonOutput = `--json, on every verb but completion: stdout holds exactly one JSON
document, the verb's result; its text and Pulumi's progress go to stderr.
A verb that fails before its result prints {"error", "rule" (a refusal's),
"exitCode"} instead; a refusal or failure after it (a preview the rules
refuse, a failed apply) prints the result, and the exit code says which.
The gated verbs (preview, up, adopt, teardown, upgrade and its "record",
secrets import) print {stack, backend, report, refusals, applied, ...}
with Pulumi's own JSON, unchanged, under "pulumi": the document 'pulumi
preview --json' prints for the plan they previewed (steps, changeSummary,
diagnostics), or for teardown the destroy's engine events, as 'pulumi
destroy --json' streams them; refresh's "pulumi" holds the refresh's.`

// noJSON are the verbs without --json, each with the reason its help
// states (TestCLIConventions holds every other verb to --json).
var noJSON = map[string]string{
	"milner completion": "No --json: each completion verb prints a shell script, which is its one output.",
}

// refusal is an error that a rule refused the operation before anything
// was changed (pipeline.ExitRefused); it names its rule (internal/pipeline).
type refusal = pipeline.Refusal

// refused returns a refusal with a formatted message.
var refused = pipeline.Refused

// confirm is the typed confirmation (pipeline.Confirm).
var confirm = pipeline.Confirm

// errPending is returned by --expect-no-changes when the stack has changes.
var errPending = pipeline.ErrPending

// usageError marks a command-line mistake (exit code 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func main() {
	stdoutTerminal = term.IsTerminal(1)
	if cmdutil.InteractiveTerminal() {
		terminal = dupTerminal()
	}
	flush, err := redact.Stdio()
	if err != nil {
		fmt.Fprintf(os.Stderr, "milner: %v\n", err)
		os.Exit(pipeline.ExitError)
	}
	exit = func(code int) { flush(); os.Exit(code) }
	exit(run(os.Args[1:]))
}

// dupTerminal returns a descriptor of its own on the terminal stdout is
// (close-on-exec: no plugin inherits it), kept for Pulumi's interactive
// display once internal/redact's pipe has taken fd 1; nil if none.
func dupTerminal() *os.File {
	fd, err := unix.FcntlInt(1, unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "terminal")
}

// exit ends the process with code once what it printed has been written
// (main sets it; a second signal outside an engine operation calls it).
var exit = os.Exit

// run runs the milner command line and returns its exit code.
func run(args []string) int {
	root := newRoot()
	root.SetArgs(args)
	in := watchInterrupts(context.Background(), os.Stderr, exit)
	defer in.stop()
	emitted = false
	cmd, err := root.ExecuteContextC(context.WithValue(in.ctx, interruptKey{}, in))
	if err == nil {
		return pipeline.ExitOK
	}
	fmt.Fprintf(os.Stderr, "milner: %s\n", err) // masked on its way out (redact.Stdio)
	code := exitCode(err)
	if in.interrupted() {
		code = pipeline.ExitCancelled
	}
	if asJSON, _ := cmd.Flags().GetBool("json"); asJSON && !emitted {
		f := failure{Error: err.Error(), ExitCode: code}
		if r := (*refusal)(nil); errors.As(err, &r) {
			f.Rule = r.Rule
		}
		_ = emit(true, f, nil, nil)
	}
	return code
}

// exitCode is the exit code of a failed command, by the error's type:
// the command line's usage errors, else pipeline.ExitCode.
func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return pipeline.ExitUsage
	}
	return pipeline.ExitCode(err)
}

// usageArgs makes an Args validator's error a usageError.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// typedUsage makes every command-line mistake cobra can find a usageError,
// so run tells them by type: flag errors through the flag-error func,
// positional arguments through each command's Args (none unless the
// command says; a verb with sub-verbs takes none: an unknown sub-verb is a
// usage error, not a help page), and required flags and flag groups
// checked before cobra's own untyped check.
func typedUsage(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := global.apply(); err != nil {
			return err
		}
		for _, check := range []func() error{cmd.ValidateRequiredFlags, cmd.ValidateFlagGroups} {
			if err := check(); err != nil {
				return usageError{err}
			}
		}
		return nil
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() && !c.Runnable() {
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
		if c.Args == nil {
			c.Args = cobra.NoArgs
		}
		c.Args = usageArgs(c.Args)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// newRoot builds the command tree.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "milner",
		Short: "Ship a Talos Kubernetes cluster as exactly its declared delta",
		Long: `milner drives the Milner Pulumi program (machines, Talos machine config,
Helm apps) on the same project, stacks, backend and passphrase as pulumi:
PULUMI_BACKEND_URL or 'pulumi login', PULUMI_CONFIG_PASSPHRASE(_FILE).
Every change is previewed, checked against the layer rules, and applied
exactly as previewed.

The stack is --stack, else the one 'pulumi stack select' chose (or
PULUMI_STACK); teardown, state restore, secrets import, upgrade and etcd
restore, which destroy or overwrite, take only an explicit --stack. A confirmation asks
you to type the stack name; -y/--yes skips it, and without a terminal
(or with --non-interactive) nothing is confirmed. On a terminal, Pulumi's
progress is its interactive display, as in pulumi (--non-interactive, a
CI environment or TERM=dumb: progress lines).

` + exitCodes + "\n\n" + jsonOutput,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	global = &globalFlags{}
	global.add(root)
	dir := root.PersistentFlags().StringP("cwd", "C", ".", "run as if milner was started in this directory: the project (Pulumi.yaml, Pulumi.<stack>.yaml, .tools/bin)")
	root.PersistentFlags().StringVar(dir, "dir", ".", "the same as --cwd")
	_ = root.PersistentFlags().MarkDeprecated("dir", "use -C/--cwd")
	root.AddCommand(
		previewCmd(), upCmd(), refreshCmd(), outputCmd(), statusCmd(),
		clientCmd(clientfiles.Kube), clientCmd(clientfiles.Talos),
		adoptCmd(), teardownCmd(), upgradeCmd(), vaultCmd(), secretsCmd(), etcdCmd(), stateCmd(), checkCmd(), docsCmd(), versionCmd(),
	)
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil {
		c.Long += "\n\n" + noJSON["milner completion"]
	}
	typedUsage(root)
	return root
}

// versionModules are the dependencies whose versions `milner version` shows.
var versionModules = []string{
	"github.com/pulumi/pulumi/pkg/v3",
	"github.com/dmacvicar/terraform-provider-libvirt",
	"github.com/pulumi/pulumi-libvirt/sdk",
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7",
	"github.com/pulumiverse/pulumi-talos/sdk",
	"github.com/pulumi/pulumi-kubernetes/sdk/v4",
}

func versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print milner's version and the engine and SDK versions it links",
		Example: `  milner version
  milner version --json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, ok := debug.ReadBuildInfo()
			if !ok {
				return fmt.Errorf("no build information in this binary")
			}
			v := version{Milner: info.Main.Version, Go: info.GoVersion, Modules: map[string]string{}}
			for _, d := range info.Deps {
				if slices.Contains(versionModules, d.Path) {
					v.Modules[d.Path] = d.Version
				}
			}
			return emit(asJSON, v, func() {
				fmt.Printf("milner %s (%s)\n", v.Milner, v.Go)
				for _, m := range versionModules {
					if ver, ok := v.Modules[m]; ok {
						fmt.Printf("  %s %s\n", m, ver)
					}
				}
			}, nil)
		},
	}
	addJSON(cmd, &asJSON)
	return cmd
}

// version is what 'milner version' prints.
type version struct {
	Milner  string            `json:"milner"`
	Go      string            `json:"go"`
	Modules map[string]string `json:"modules"`
}
