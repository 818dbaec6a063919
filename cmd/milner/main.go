// Command milner runs the Milner program on the Pulumi engine and turns the
// seeds' shipping rules into commands that cannot be skipped by accident:
// a gated up, node replacement, adoption, a confirmed full teardown, and
// the client configs, status and docs of a stack. It works on the same
// project, stack files, backend and passphrase as the user's `pulumi`.
//
// Exit codes: 0 ok; 1 error; 2 usage; 3 refused by a rule (nothing was
// changed); 4 changes pending (preview/up --expect-no-changes); 130
// interrupted (SIGINT or SIGTERM: the engine cancelled gracefully).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
)

// The exit codes, documented in the CLI reference.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitRefused = 3
	exitPending = 4
	// exitInterrupted is the shell's code for a SIGINT: the first SIGINT or
	// SIGTERM cancelled the command gracefully (interrupt.go).
	exitInterrupted = 130
)

// refusal is an error that a rule refused the operation before anything
// was changed (exit code 3).
type refusal struct{ msg string }

func (r *refusal) Error() string { return "refused: " + r.msg }

// refused returns a refusal with a formatted message.
func refused(format string, a ...any) error { return &refusal{msg: fmt.Sprintf(format, a...)} }

// errPending is returned by --expect-no-changes when the stack has changes.
var errPending = errors.New("changes pending")

// usageError marks a command-line mistake (exit code 2).
type usageError struct{ error }

func main() { os.Exit(run(os.Args[1:])) }

// run runs the milner command line and returns its exit code.
func run(args []string) int {
	root := newRoot()
	root.SetArgs(args)
	in := watchInterrupts(context.Background(), os.Stderr)
	defer in.stop()
	err := root.ExecuteContext(context.WithValue(in.ctx, interruptKey{}, in))
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "milner: %s\n", engine.Redact(err.Error()))
	var r *refusal
	var u usageError
	switch {
	case in.interrupted():
		return exitInterrupted
	case errors.As(err, &r):
		return exitRefused
	case errors.Is(err, errPending):
		return exitPending
	case errors.As(err, &u), isCobraUsage(err):
		return exitUsage
	default:
		return exitError
	}
}

// isCobraUsage reports cobra's own command-line errors, which it returns
// as plain errors: an unknown verb, a missing required flag, bad arguments.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "required flag", "accepts ", "unknown flag", "unknown shorthand"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
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
exactly as previewed. Exit codes: 0 ok, 1 error, 2 usage, 3 refused by a
rule (nothing changed), 4 changes pending (--expect-no-changes), 130
interrupted: the first SIGINT or SIGTERM cancels gracefully (the steps in
flight finish, the state is saved, every lock is released), a second one
terminates.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().String("dir", ".", "project directory (Pulumi.yaml, Pulumi.<stack>.yaml, .tools/bin)")
	root.AddCommand(
		previewCmd(), upCmd(), refreshCmd(), outputCmd(), statusCmd(),
		clientCmd(kubeconfig), clientCmd(talosconfig),
		adoptCmd(), teardownCmd(), upgradeCmd(), vaultCmd(), secretsCmd(), stateCmd(), checkCmd(), docsCmd(), versionCmd(),
	)
	return root
}
