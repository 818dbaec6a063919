package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/tests/ptytest"
)

// TestEveryVerbTakesPulumisFlags: every verb takes Pulumi's display and
// logging flags, under Pulumi's names and shorthands.
func TestEveryVerbTakesPulumisFlags(t *testing.T) {
	for path, cmd := range verbs(newRoot()) {
		for name, short := range map[string]string{"event-log": "", "diff": "", "color": "", "verbose": "v", "debug": "d", "non-interactive": ""} {
			f := cmd.InheritedFlags().Lookup(name)
			if assert.NotNil(t, f, "%s --%s", path, name) {
				assert.Equal(t, short, f.Shorthand, "%s --%s", path, name)
			}
		}
	}
}

// TestColorAsPulumiReadsIt: --color takes Pulumi's four values; auto is
// colour only on a terminal and without NO_COLOR; an explicit value wins
// over NO_COLOR; anything else is a usage error, as is -v below 0.
func TestColorAsPulumiReadsIt(t *testing.T) {
	t.Cleanup(func() { stdoutTerminal = false })
	for _, tc := range []struct {
		flag     string
		terminal bool
		noColor  bool
		want     colors.Colorization
	}{
		{"auto", true, false, colors.Always},
		{"auto", true, true, colors.Never},
		{"auto", false, false, colors.Never},
		{"always", false, true, colors.Always},
		{"never", true, false, colors.Never},
		{"raw", true, false, colors.Raw},
	} {
		stdoutTerminal = tc.terminal
		if tc.noColor {
			t.Setenv("NO_COLOR", "1")
		} else {
			t.Setenv("NO_COLOR", "")
			require.NoError(t, os.Unsetenv("NO_COLOR"))
		}
		stdout(t, func() { require.Equal(t, pipeline.ExitOK, run([]string{"version", "--color", tc.flag})) })
		assert.Equal(t, tc.want, global.display.Color, "--color %s, terminal %v, NO_COLOR %v", tc.flag, tc.terminal, tc.noColor)
	}
	assert.Equal(t, pipeline.ExitUsage, run([]string{"version", "--color", "sometimes"}))
	assert.Equal(t, pipeline.ExitUsage, run([]string{"version", "-v", "-1"}))
}

// TestInteractiveAsPulumiDecidesIt: on a terminal Pulumi's interactive
// display is used (engine.Display.Terminal), not with --non-interactive
// nor in a CI environment; --non-interactive also refuses the typed
// confirmation on a terminal (usage, exit 2), which --yes skips.
func TestInteractiveAsPulumiDecidesIt(t *testing.T) {
	master, tty := ptytest.Open(t)
	t.Cleanup(func() { terminal = nil })
	terminal = tty
	for _, tc := range []struct {
		args []string
		ci   bool
		want bool
	}{
		{[]string{"version"}, false, true},
		{[]string{"version", "--non-interactive"}, false, false},
		{[]string{"version"}, true, false},
	} {
		if tc.ci {
			t.Setenv("PULUMI_DISABLE_CI_DETECTION", "")
			t.Setenv("PULUMI_CI_SYSTEM", "woodpecker")
		} else {
			t.Setenv("PULUMI_DISABLE_CI_DETECTION", "1")
			t.Setenv("PULUMI_CI_SYSTEM", "")
		}
		stdout(t, func() { require.Equal(t, pipeline.ExitOK, run(tc.args)) })
		assert.Equal(t, tc.want, global.display.Terminal != nil, "%v, CI %v", tc.args, tc.ci)
	}
	t.Cleanup(func() { cmdutil.DisableInteractive = false })
	cmdutil.DisableInteractive = true
	_, err := master.WriteString("dev\n")
	require.NoError(t, err)
	err = confirm(context.Background(), tty, &bytes.Buffer{}, "Apply?", "dev")
	require.Error(t, err, "--non-interactive: the stack name typed on a terminal confirms nothing")
	assert.Equal(t, pipeline.ExitUsage, exitCode(err), "%v", err)
	assert.Contains(t, err.Error(), "--yes")
}

// TestVerboseFlowsToPlugins: -v N is Pulumi's logging at level N, flowed
// to the plugins the engine starts (logging.LogFlow: they get -v=N).
func TestVerboseFlowsToPlugins(t *testing.T) {
	t.Cleanup(func() { logging.InitLogging(false, 0, false) })
	stdout(t, func() { require.Equal(t, pipeline.ExitOK, run([]string{"version", "-v", "5"})) })
	assert.Equal(t, 5, logging.Verbose)
	assert.True(t, logging.LogFlow, "the level flows to the plugins")
}

// TestEventLogAndJSONThroughAVerb: a verb's operations reach the engine
// with the command line's display (--event-log: Pulumi's events of the
// refresh), and refresh prints its result as JSON.
func TestEventLogAndJSONThroughAVerb(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("PULUMI_HOME", filepath.Join(home, ".pulumi"))
	t.Setenv("PULUMI_BACKEND_URL", "file://"+filepath.Join(home, "state"))
	log := filepath.Join(home, "events.jsonl")
	out := stdout(t, func() {
		require.Equal(t, pipeline.ExitOK, run([]string{"refresh", "--stack", "local", "-C", "../..", "--yes", "--json", "--event-log", log}))
	})
	var got refreshed
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, "local", got.Stack)
	// pulumi: the engine events `pulumi refresh --json` prints.
	var evs []apitype.EngineEvent
	require.NoError(t, json.Unmarshal(got.Pulumi, &evs), string(got.Pulumi))
	require.NotEmpty(t, evs)
	assert.NotNil(t, evs[0].PreludeEvent, "the refresh's events, from its prelude")
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	var preludes int
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var ev apitype.EngineEvent
		require.NoError(t, json.Unmarshal(line, &ev), string(line))
		if ev.PreludeEvent != nil {
			preludes++
		}
	}
	assert.Equal(t, 1, preludes, "the refresh's events")
	assert.True(t, strings.HasPrefix(string(b), "{"))
}

// TestJSONOfTheStateVerbs: on the committed local stack with an empty
// backend, teardown --json is one document with Pulumi's destroy events
// under "pulumi" (its prelude first), state unlock --json the locks left
// (none: []), state backups --json the backup the teardown left.
func TestJSONOfTheStateVerbs(t *testing.T) {
	noCurrentStack(t)
	decode := func(args ...string) json.RawMessage {
		t.Helper()
		out := stdout(t, func() {
			require.Equal(t, pipeline.ExitOK, run(append(args, "--stack", "local", "-C", "../..", "--json")))
		})
		var doc json.RawMessage
		dec := json.NewDecoder(strings.NewReader(out))
		require.NoError(t, dec.Decode(&doc), out)
		require.False(t, dec.More(), "one document on stdout: %s", out)
		return doc
	}
	var torn struct {
		Stack   string                `json:"stack"`
		Applied bool                  `json:"applied"`
		Pulumi  []apitype.EngineEvent `json:"pulumi"`
	}
	require.NoError(t, json.Unmarshal(decode("teardown", "--yes"), &torn))
	assert.Equal(t, "local", torn.Stack)
	assert.True(t, torn.Applied)
	require.NotEmpty(t, torn.Pulumi)
	assert.NotNil(t, torn.Pulumi[0].PreludeEvent, "the destroy's events, from its prelude")

	assert.JSONEq(t, "[]", string(decode("state", "unlock")), "no lock left")
	var backups []map[string]any
	require.NoError(t, json.Unmarshal(decode("state", "backups"), &backups))
	assert.NotEmpty(t, backups, "the teardown's checkpoint")
}
