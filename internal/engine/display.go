package engine

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pulumi/pulumi/pkg/v3/backend/display"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/logging"
)

// Display is how an operation is shown and recorded, as the Pulumi CLI's
// own flags say it (pkg/v3 v3.276.0 cmd/pulumi/pulumi.go: --color, -v;
// cmd/pulumi/operations/up.go and preview.go: --event-log, --diff,
// --debug). The zero value is milner's default: progress rows, no colour,
// no debug messages, no event log kept.
type Display struct {
	// EventLog, when set, is the file every operation the Stack runs
	// writes its engine events to: Pulumi's own JSON lines
	// (apitype.EngineEvent, written by pkg/v3 backend/display
	// startEventLogger). Pulumi truncates the file per operation; a milner
	// verb runs several (up: its preview, then the update), so the first
	// operation makes the file anew (0600) and the later ones append.
	EventLog string
	// Diff shows each operation as Pulumi's detailed diff
	// (display.DisplayDiff, `pulumi preview --diff`) instead of its
	// progress rows.
	Diff bool
	// Color is the colorization (Colorization); "" is never.
	Color colors.Colorization
	// Debug shows the engine's and the plugins' debug messages
	// (`pulumi up --debug`: UpdateOptions.Debug and display.Options.Debug).
	Debug bool
	// Terminal is the terminal milner's standard output was when it
	// started, as a descriptor of its own (internal/redact's pipe takes
	// fd 1), set when the Pulumi CLI would be interactive
	// (cmdutil.Interactive: stdin and stdout terminals, TERM not dumb,
	// not in CI, no --non-interactive). An operation whose progress is
	// os.Stdout then shows Pulumi's interactive display: its rows
	// rewritten in place, sized to the terminal, its keys read (ctrl+c
	// interrupts, as in Pulumi). Nil: progress lines.
	Terminal *os.File
}

// ErrEnvironment refuses a stack file's environment: key (Pulumi ESC).
// ESC environments are opened through Pulumi Cloud (pkg/v3 v3.276.0
// backend/httpstate is the one backend implementing
// backend.EnvironmentsBackend); milner runs on self-managed (DIY)
// backends, which open none, so a stack file that names one is refused
// before anything is read from or written to the backend, instead of being
// run without the values the environment would have given.
var ErrEnvironment = errors.New("environment: (Pulumi ESC) is not supported: ESC environments live in Pulumi Cloud and milner runs on self-managed (DIY) backends, which open none; put the values in the stack's config ('pulumi config set [--secret]') and remove the environment: key")

// Colorization is --color (always, never, raw or auto) as Pulumi's CLI
// reads it (cmdutil.SetGlobalColorization, GetGlobalColorization): auto
// is never when NO_COLOR is set or stdout is not a terminal, else always.
// terminal says whether stdout was a terminal when milner started: milner
// masks its own stdout through a pipe (internal/redact), so the process
// cannot ask its fd 1 afterwards.
func Colorization(flag string, terminal bool) (colors.Colorization, error) {
	if err := cmdutil.SetGlobalColorization(flag); err != nil {
		return "", err
	}
	if flag != "auto" {
		return cmdutil.GetGlobalColorization(), nil
	}
	if _, ok := os.LookupEnv("NO_COLOR"); ok || !terminal {
		return colors.Never, nil
	}
	return colors.Always, nil
}

// Logging turns on Pulumi's verbose logging at level verbose (-v N, the
// CLI's logging.InitLogging): to stderr, and flowed to every plugin the
// engine starts (they get -v=N and --logtostderr, as `pulumi
// --logflow`). 0 leaves logging off.
func Logging(verbose int) error {
	if verbose < 0 {
		return fmt.Errorf("-v/--verbose %d: want 0 or more", verbose)
	}
	if verbose > 0 {
		logging.InitLogging(true, verbose, true)
	}
	return nil
}

// options are the display options of one operation writing its events to
// log.
func (d Display) options(log string) display.Options {
	color := d.Color
	if color == "" {
		color = colors.Never
	}
	typ := display.DisplayProgress
	if d.Diff {
		typ = display.DisplayDiff
	}
	return display.Options{
		Color: color, Type: typ, SuppressPermalink: true, Debug: d.Debug,
		ShowReplacementSteps: d.Diff, EventLogPath: log,
	}
}

// showOn sets where an operation is shown: on progress, or, when that is
// milner's stdout and it was a terminal, Pulumi's interactive display on
// it.
func (d Display) showOn(o *display.Options, progress io.Writer) {
	o.Stdout, o.Stderr = progress, progress
	if d.Terminal == nil || progress != os.Stdout {
		return
	}
	o.IsInteractive = true
	o.Stdout = terminalOut{fd: d.Terminal.Fd(), w: progress}
}

// terminalOut is the interactive display's stdout: Pulumi's terminal.Open
// (pkg/v3 v3.276.0 backend/display/internal/terminal/term.go) takes the
// size and sets raw mode through its Fd, the terminal's; what the display
// writes still goes to w, milner's stdout, through the masking pipe.
// Only Write is offered, so nothing reaches the terminal unmasked.
type terminalOut struct {
	fd uintptr
	w  io.Writer
}

func (t terminalOut) Fd() uintptr                 { return t.fd }
func (t terminalOut) Write(b []byte) (int, error) { return t.w.Write(b) }

// keepEvents copies an operation's event log (from) to the --event-log
// file: made anew by the Stack's first operation, appended to by the rest.
func (s *Stack) keepEvents(from string) error {
	if s.display.EventLog == "" {
		return nil
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if !s.eventsKept {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(s.display.EventLog, flags, 0o600)
	if err != nil {
		return fmt.Errorf("--event-log: %w", err)
	}
	s.eventsKept = true
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("--event-log: %w", err)
	}
	return f.Close()
}
