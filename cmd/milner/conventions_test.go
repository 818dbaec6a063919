package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/docs"
	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/stacks/config"
)

// explicitStack are the verbs that destroy or overwrite: they never fall
// back to the current stack.
var explicitStack = map[string]bool{
	"milner teardown": true, "milner state restore": true, "milner secrets import": true, "milner upgrade": true, "milner etcd restore": true,
}

// verbs is every runnable command of the tree, by command path.
func verbs(root *cobra.Command) map[string]*cobra.Command {
	out := map[string]*cobra.Command{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.HasSubCommands() {
			out[c.CommandPath()] = c
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}

// isRequired reports whether cobra enforces f (MarkFlagRequired).
func isRequired(f *pflag.Flag) bool {
	_, ok := f.Annotations[cobra.BashCompOneRequiredFlag]
	return ok
}

// TestCLIConventions holds every verb to the CLI conventions (the root
// help states them): help text that prints what it means, "(required)"
// exactly where cobra requires the flag, -y wherever --yes, --stack
// explicit only on the verbs that destroy or overwrite, and usage
// mistakes exit 2 by type.
func TestCLIConventions(t *testing.T) {
	all := verbs(newRoot())
	for _, want := range []string{"milner preview", "milner up", "milner secrets generate", "milner secrets export", "milner state restore", "milner vault unseal", "milner completion bash"} {
		require.Contains(t, all, want, "the walk sees every sub-verb")
	}
	for path, cmd := range all {
		t.Run(path, func(t *testing.T) {
			args := strings.Fields(path)[1:]
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				name, _ := pflag.UnquoteUsage(f)
				assert.NotContains(t, f.Usage, "`", "--%s: pflag would print the backquoted text as the value name (%q)", f.Name, name)
				assert.Equal(t, isRequired(f), strings.Contains(f.Usage, "(required"), "--%s: says required iff required: %q", f.Name, f.Usage)
			})
			cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) {
				assert.NotContains(t, f.Usage, "`", "--%s (inherited)", f.Name)
			})
			if yes := cmd.Flags().Lookup("yes"); yes != nil {
				assert.Equal(t, "y", yes.Shorthand, "--yes has -y")
			}
			if cmd.Flags().Lookup("confirm") != nil {
				assert.NotEmpty(t, cmd.Flags().Lookup("confirm").Deprecated, "--confirm survives only as a deprecated alias of --yes")
			}
			if s := cmd.Flags().Lookup("stack"); s != nil && path != "milner check" && path != "milner docs" {
				assert.Equal(t, explicitStack[path], isRequired(s), "--stack is required exactly on the verbs that destroy or overwrite")
				if explicitStack[path] {
					assert.Equal(t, pipeline.ExitUsage, run(args), "without --stack")
				}
			}
			assert.Equal(t, pipeline.ExitUsage, run(append(slices.Clone(args), "--no-such-flag")), "an unknown flag")
			assert.Equal(t, pipeline.ExitUsage, run(append(slices.Clone(args), "a", "b", "c")), "arguments the verb does not take")
			assert.Equal(t, pipeline.ExitOK, run(append(slices.Clone(args), "--help")), "--help")
			if cmd.Runnable() && !strings.HasPrefix(path, "milner completion") {
				assert.NotEmpty(t, cmd.Example, "every verb's --help has examples")
			}
			// --json on every verb, one flag with one usage, or the reason
			// its help gives (noJSON, by the verb or its parent).
			if reason, ok := noJSON[cmd.Parent().CommandPath()]; ok {
				assert.Nil(t, cmd.Flags().Lookup("json"))
				assert.Contains(t, cmd.Parent().Long, reason, "the help says why there is no --json")
			} else if assert.NotNil(t, cmd.Flags().Lookup("json"), "every verb has --json") {
				assert.Equal(t, jsonUsage, cmd.Flags().Lookup("json").Usage)
			}
		})
	}
}

// TestUsageByType: the exit code follows the error's type, never its text.
func TestUsageByType(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"nope"}, pipeline.ExitUsage},                             // an unknown verb
		{[]string{"secrets", "nope"}, pipeline.ExitUsage},                  // an unknown sub-verb
		{[]string{"secrets"}, pipeline.ExitOK},                             // a verb with sub-verbs prints its help
		{[]string{"teardown", "--stack", "x", "cp-1"}, pipeline.ExitUsage}, // a target teardown does not take
		{[]string{"vault", "status"}, pipeline.ExitUsage},                  // required persistent flags
		{[]string{"preview", "--stack", "x", "--replace"}, pipeline.ExitUsage},
		{[]string{"output", "a", "b"}, pipeline.ExitUsage},
		// adopt takes one of --node with --id, --all, --bootstrap; check --stack or --all
		{[]string{"adopt", "--stack", "x"}, pipeline.ExitUsage},
		{[]string{"adopt", "--stack", "x", "--id", "1"}, pipeline.ExitUsage},
		{[]string{"adopt", "--stack", "x", "--holder"}, pipeline.ExitUsage},
		{[]string{"adopt", "--stack", "x", "--all", "--node", "cp-1", "--id", "1"}, pipeline.ExitUsage},
		{[]string{"adopt", "--stack", "x", "--bootstrap", "--all"}, pipeline.ExitUsage},
		{[]string{"check", "--stack", "x", "--all"}, pipeline.ExitUsage},
	} {
		assert.Equal(t, tc.want, run(tc.args), "%v", tc.args)
	}
}

// noCurrentStack gives the test a fresh HOME and an empty file backend,
// with no stack selected and no PULUMI_STACK.
func noCurrentStack(t *testing.T) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("PULUMI_HOME", filepath.Join(home, ".pulumi"))
	t.Setenv("PULUMI_BACKEND_URL", "file://"+filepath.Join(home, "state"))
	require.NoError(t, os.Mkdir(filepath.Join(home, "state"), 0o700))
	t.Setenv("PULUMI_STACK", "")
	require.NoError(t, os.Unsetenv("PULUMI_STACK"))
}

// TestCurrentStackOrUsage: without --stack a verb takes the current stack;
// with none selected it is a usage error naming both ways to give one.
func TestCurrentStackOrUsage(t *testing.T) {
	noCurrentStack(t)
	for _, verb := range [][]string{{"status"}, {"preview"}, {"up"}, {"output"}, {"refresh"}, {"kubeconfig"}, {"adopt", "--all"}, {"state", "backups"}, {"secrets", "export", "--out", "x", "--recipient", "y"}} {
		assert.Equal(t, pipeline.ExitNoStack, run(append(verb, "-C", "../..")), "%v with no current stack", verb)
	}
}

// TestDocsDriftExitsPending: drift is pipeline.ExitPending (7), like preview drift.
func TestDocsDriftExitsPending(t *testing.T) {
	dir := t.TempDir()
	// The stacks and the supported-versions table docs/compatibility.md links to.
	for _, f := range []string{"Pulumi.yaml", "Pulumi.local.yaml", config.SupportedVersionsFile} {
		b, err := os.ReadFile(filepath.Join("../..", f))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	assert.Equal(t, pipeline.ExitPending, run([]string{"docs", "--check", "-C", dir}), "docs/cli.md, docs/stacks.md and docs/compatibility.md are missing: drift")
	var drift docsChecked
	decode(t, stdout(t, func() {
		assert.Equal(t, pipeline.ExitPending, run([]string{"docs", "--check", "--json", "-C", dir}))
	}), &drift)
	assert.Contains(t, drift.Drifted, "docs/cli.md", "--json: the drifted files")
	var wrote docsChecked
	decode(t, stdout(t, func() { assert.Equal(t, pipeline.ExitOK, run([]string{"docs", "--json", "-C", dir})) }), &wrote)
	assert.Contains(t, wrote.Wrote, "docs/cli.md")
	assert.Equal(t, pipeline.ExitOK, run([]string{"docs", "--check", "-C", dir}))
}

// TestExitCodesDocumentedOnce: the root help states the exit codes, and the
// generated reference holds them once.
func TestExitCodesDocumentedOnce(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--help"})
	require.NoError(t, root.Execute())
	assert.Contains(t, out.String(), exitCodes)
	ref, err := docs.CLIReference(newRoot())
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(ref, exitCodes))
	assert.Equal(t, 1, strings.Count(ref, jsonOutput), "--json is described once")
	for _, sub := range []string{"## milner secrets export", "## milner state restore", "## milner vault unseal", "## milner secrets generate"} {
		assert.Contains(t, ref, sub+"\n", "the reference has every sub-verb")
	}
}

// TestStatusJSONKeepsVersions: --json prints what the text prints,
// --versions included (here the nodes cannot be asked: the note says why).
func TestStatusJSONKeepsVersions(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("PULUMI_HOME", filepath.Join(home, ".pulumi"))
	t.Setenv("PULUMI_BACKEND_URL", "file://"+filepath.Join(home, "state"))
	out := stdout(t, func() {
		require.Equal(t, pipeline.ExitOK, run([]string{"status", "--json", "--versions", "--stack", "local", "-C", "../.."}))
	})
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Contains(t, got, "versions", out)
	assert.NotEmpty(t, got["versions"].(map[string]any)["note"], out)
}

// stdout returns what f printed on os.Stdout.
func stdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r)
		done <- b.String()
	}()
	defer func() { os.Stdout = old }()
	f()
	os.Stdout = old
	require.NoError(t, w.Close())
	return <-done
}

// decode decodes out, which must be exactly one JSON document, into v.
func decode(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), out)
	require.False(t, dec.More(), "one document on stdout: %s", out)
}

// TestJSONFailureDocument: under --json a verb that fails before its
// result still prints one JSON document, the failure, with the exit code
// it exits with (no stack: 6; a refusal: 5).
func TestJSONFailureDocument(t *testing.T) {
	noCurrentStack(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"status", "--json"}, pipeline.ExitNoStack},
		{[]string{"teardown", "--json", "--no-such-flag"}, pipeline.ExitUsage},
		{[]string{"secrets", "generate", "--json", "--stack", "dev", "--out", filepath.Join("..", "..", "docs", "generated-secrets")}, pipeline.ExitRefused},
	} {
		var f failure
		decode(t, stdout(t, func() { assert.Equal(t, tc.code, run(append(tc.args, "-C", "../.."))) }), &f)
		assert.Equal(t, tc.code, f.ExitCode, "%v", tc.args)
		assert.NotEmpty(t, f.Error, "%v", tc.args)
	}
}

// TestJSONResults decodes the --json results of the verbs that run here
// without a cluster: version, and secrets generate (the files it wrote).
func TestJSONResults(t *testing.T) {
	var v version
	decode(t, stdout(t, func() { require.Equal(t, pipeline.ExitOK, run([]string{"version", "--json"})) }), &v)
	assert.NotEmpty(t, v.Go)

	out := t.TempDir()
	var w wroteSecrets
	decode(t, stdout(t, func() {
		require.Equal(t, pipeline.ExitOK, run([]string{"secrets", "generate", "--json", "--stack", "dev", "-C", "../..", "--out", out}))
	}), &w)
	files, err := os.ReadDir(out)
	require.NoError(t, err)
	require.Len(t, w.Files, len(files))
	for _, f := range files {
		assert.Contains(t, w.Files, f.Name())
	}
	assert.Equal(t, "dev", w.Stack)
}
