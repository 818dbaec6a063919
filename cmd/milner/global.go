package main

import (
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/ciutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
)

// globalFlags are the flags every verb takes, named and read as the Pulumi
// CLI's (pkg/v3 v3.276.0 cmd/pulumi/pulumi.go: --color, -v;
// operations/up.go, preview.go: --event-log, --diff, -d/--debug); what
// they do is engine.Display and engine.Logging.
type globalFlags struct {
	eventLog, color string
	diff, debug     bool
	verbose         int
	display         engine.Display // set by apply
}

// global are the flags of the command line being run (newRoot makes them).
var global = &globalFlags{}

// stdoutTerminal: stdout was a terminal when milner started (main asks
// before internal/redact puts its pipe in place).
var stdoutTerminal bool

// terminal is that terminal, when stdin is one too and TERM is not dumb
// (cmdutil.InteractiveTerminal, asked by main before the pipe): where
// Pulumi's interactive display goes (engine.Display.Terminal).
var terminal *os.File

func (g *globalFlags) add(root *cobra.Command) {
	p := root.PersistentFlags()
	p.StringVar(&g.eventLog, "event-log", "", "write the engine events of every operation the verb runs to this file, Pulumi's own JSON lines (as pulumi --event-log)")
	p.BoolVar(&g.diff, "diff", false, "show each operation as Pulumi's detailed diff instead of its progress rows")
	p.StringVar(&g.color, "color", "auto", "colorize Pulumi's output: always, never, raw or auto (colour on a terminal unless NO_COLOR is set)")
	p.IntVarP(&g.verbose, "verbose", "v", 0, "Pulumi's verbose logging (e.g. -v=9) to stderr, passed on to the engine and every plugin")
	p.BoolVarP(&g.debug, "debug", "d", false, "show the engine's and the plugins' debug messages")
	p.BoolVar(&cmdutil.DisableInteractive, "non-interactive", false, "no interactive display and no prompts (a confirmation then needs --yes), as pulumi --non-interactive")
}

// apply checks the flags and sets what they set process-wide, as the Pulumi
// CLI's root does before any command.
func (g *globalFlags) apply() error {
	color, err := engine.Colorization(g.color, stdoutTerminal)
	if err != nil {
		return usageError{fmt.Errorf("--color: %w", err)}
	}
	if err := engine.Logging(g.verbose); err != nil {
		return usageError{err}
	}
	g.display = engine.Display{EventLog: g.eventLog, Diff: g.diff, Color: color, Debug: g.debug}
	// Interactive as the Pulumi CLI decides it (sdk/v3 v3.276.0
	// cmdutil.Interactive: a terminal, no --non-interactive, not in CI).
	if terminal != nil && !cmdutil.DisableInteractive && !ciutil.IsCI() {
		g.display.Terminal = terminal
	}
	return nil
}
