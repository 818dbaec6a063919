package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"golang.org/x/sys/unix"

	"github.com/milner/milner/tests/ptytest"
)

// displayProject writes a project with one stack, stack, whose file is text.
func displayProject(t *testing.T, stack, text string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"Pulumi.yaml": "name: displaytest\nruntime: go\n", "Pulumi." + stack + ".yaml": text} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// openDisplay opens the stack with d, its progress into out; the program
// logs one debug and one info message.
func openDisplay(t *testing.T, dir string, d Display, out *bytes.Buffer) *Stack {
	t.Helper()
	st, err := Open(context.Background(), Options{Stack: "s", Dir: dir, Backend: "file://" + filepath.Join(dir, "state"),
		Passphrase: "correct horse battery staple 42", Progress: out, Display: d,
		Program: func(ctx *pulumi.Context) error {
			_ = ctx.Log.Debug("a debug message from the program", nil)
			ctx.Export("answer", pulumi.Int(42))
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestEventLogKeepsEveryOperation: --event-log holds Pulumi's own engine
// events (apitype.EngineEvent JSON lines) of every operation the Stack
// runs, in order (a preview then an up: two preludes, two summaries); a
// later command makes the file anew, readable by its owner only.
func TestEventLogKeepsEveryOperation(t *testing.T) {
	dir := displayProject(t, "s", "config: {}\n")
	log := filepath.Join(t.TempDir(), "events.jsonl")
	ctx := context.Background()
	st := openDisplay(t, dir, Display{EventLog: log}, &bytes.Buffer{})
	if _, _, err := st.Preview(ctx, PlanOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if got := countEvents(t, log); got["prelude"] != 2 || got["summary"] != 2 {
		t.Errorf("event log after a preview and an up: %v, want 2 preludes and 2 summaries", got)
	}
	if fi, err := os.Stat(log); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("event log mode: %v, %v; want 0600", fi.Mode(), err)
	}
	st = openDisplay(t, dir, Display{EventLog: log}, &bytes.Buffer{})
	if _, _, err := st.Preview(ctx, PlanOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := countEvents(t, log); got["prelude"] != 1 {
		t.Errorf("event log of a later command: %v, want its one operation only", got)
	}
}

// countEvents parses the event log, every line an apitype.EngineEvent, and
// counts preludes and summaries.
func countEvents(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	got := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var ev apitype.EngineEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("not an engine event: %v: %s", err, sc.Text())
		}
		switch {
		case ev.PreludeEvent != nil:
			got["prelude"]++
		case ev.SummaryEvent != nil:
			got["summary"]++
		}
	}
	return got
}

// TestDisplayFollowsTheFlags: the default is plain progress rows without
// colour or debug messages; --color always colours them, --debug shows
// the program's debug message, --diff is Pulumi's detailed diff.
func TestDisplayFollowsTheFlags(t *testing.T) {
	dir := displayProject(t, "s", "config: {}\n")
	ctx := context.Background()
	preview := func(d Display) string {
		var out bytes.Buffer
		if _, _, err := openDisplay(t, dir, d, &out).Preview(ctx, PlanOptions{}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	plain := preview(Display{})
	if strings.Contains(plain, "\x1b[") || strings.Contains(plain, "a debug message") {
		t.Errorf("default display has colour or debug messages:\n%s", plain)
	}
	if got := preview(Display{Color: colors.Always}); !strings.Contains(got, "\x1b[") {
		t.Errorf("--color always: no colour:\n%q", got)
	}
	if got := preview(Display{Debug: true}); !strings.Contains(got, "a debug message from the program") {
		t.Errorf("--debug: no debug message:\n%s", got)
	}
	if got := preview(Display{Diff: true}); !strings.Contains(got, "[urn=urn:pulumi:s::displaytest::pulumi:pulumi:Stack::displaytest-s]") {
		t.Errorf("--diff: no detailed diff (each step with its URN):\n%s\nplain:\n%s", got, plain)
	}
}

// TestEnvironmentRefused: a stack file naming a Pulumi ESC environment is
// refused at Open, naming the file and the key, before the backend is
// touched.
func TestEnvironmentRefused(t *testing.T) {
	dir := displayProject(t, "s", "environment:\n  - milner/prod\nconfig: {}\n")
	_, err := Open(context.Background(), Options{Stack: "s", Dir: dir, Backend: "file://" + filepath.Join(dir, "state"),
		Passphrase: "correct horse battery staple 42", Program: func(*pulumi.Context) error { return nil }})
	if !errors.Is(err, ErrEnvironment) {
		t.Fatalf("Open: %v, want ErrEnvironment", err)
	}
	if msg := err.Error(); !strings.Contains(msg, filepath.Join(dir, "Pulumi.s.yaml")+": environment:") {
		t.Errorf("the error does not name the stack file and key: %s", msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); !os.IsNotExist(err) {
		t.Errorf("the backend was touched: %v", err)
	}
}

// TestInteractiveDisplayOnATerminal: with the terminal milner started on,
// an operation whose progress is milner's stdout shows Pulumi's
// interactive display there (its rows rewritten in place: the erase-line
// sequence "\x1b[K" the line renderer never writes); the same operation
// with its progress elsewhere (a verb under --json) keeps progress lines.
func TestInteractiveDisplayOnATerminal(t *testing.T) {
	master, tty := ptytest.Open(t)
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 120}); err != nil {
		t.Fatal(err)
	}
	var shown bytes.Buffer
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(&shown, master) // ends with EIO once tty is closed
	}()
	stdin, stdout := os.Stdin, os.Stdout
	os.Stdin, os.Stdout = tty, tty
	t.Cleanup(func() { os.Stdin, os.Stdout = stdin, stdout })

	dir := displayProject(t, "s", "config: {}\n")
	var elsewhere bytes.Buffer
	if _, _, err := openDisplay(t, dir, Display{Terminal: tty}, &elsewhere).Preview(context.Background(), PlanOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := Open(context.Background(), Options{Stack: "s", Dir: dir, Backend: "file://" + filepath.Join(dir, "state"),
		Passphrase: "correct horse battery staple 42", Progress: os.Stdout, Display: Display{Terminal: tty},
		Program: func(ctx *pulumi.Context) error { ctx.Export("answer", pulumi.Int(42)); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Preview(context.Background(), PlanOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = tty.Close()
	<-drained
	if !strings.Contains(shown.String(), "\x1b[K") || !strings.Contains(shown.String(), "displaytest-s") {
		t.Errorf("progress on the terminal: not Pulumi's interactive display:\n%q", shown.String())
	}
	if strings.Contains(elsewhere.String(), "\x1b[") || !strings.Contains(elsewhere.String(), "displaytest-s") {
		t.Errorf("progress elsewhere (--json): not progress lines:\n%q", elsewhere.String())
	}
}
