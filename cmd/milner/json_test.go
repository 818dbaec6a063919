package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/conformance"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/etcdbackup"
	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/internal/status"
	"github.com/milner/milner/tests/etcdtest"
)

// TestJSONOnAStackWithState decodes, strictly (decode: one document, no
// field the type lacks), the --json results of the verbs that read or
// restore a stack's state, on the committed local stack with a file
// backend whose state one update wrote: a program of no resources that
// exports two outputs (no provider, no cluster). output prints the
// outputs, whole or one by name; kubeconfig and talosconfig the file they
// merged the stack's config into; status the state's report; state
// backups the checkpoint copies; state restore the backup it put back
// (the state it replaced kept as one more backup); state locks the lock
// another Milner holds, with its pid and command.
func TestJSONOnAStackWithState(t *testing.T) {
	noCurrentStack(t)
	ctx := context.Background()
	nodes := map[string]any{"cp-1": "10.199.0.11", "cp-2": "10.199.0.12"}
	// The client configs as the Talos layer exports them (only their shape
	// matters to the merge: internal/clientfiles' tests).
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- name: milner-local\n  cluster: {server: https://10.199.0.240:6443}\ncontexts:\n- name: admin@milner-local\n  context: {cluster: milner-local, user: admin@milner-local}\nusers:\n- name: admin@milner-local\n  user: {client-key-data: aw==}\ncurrent-context: admin@milner-local\n"
	talosconfig := "context: milner-local\ncontexts:\n  milner-local:\n    endpoints: [10.199.0.11]\n"
	st, err := engine.Open(ctx, engine.Options{Stack: "local", Dir: "../..", Progress: io.Discard, Command: "milner json-test",
		Program: func(ctx *pulumi.Context) error {
			ctx.Export("cluster", pulumi.String("milner-local"))
			ctx.Export("nodes", pulumi.ToMap(nodes))
			ctx.Export("kubeconfig", pulumi.String(kubeconfig))
			ctx.Export("talosconfig", pulumi.String(talosconfig))
			return nil
		}})
	require.NoError(t, err)
	_, err = st.Up(ctx)
	require.NoError(t, err)
	// jsonOf runs a verb on the local stack with --json, exit 0, decodes
	// its document strictly into v and returns it.
	jsonOf := func(v any, args ...string) string {
		t.Helper()
		out := stdout(t, func() {
			require.Equal(t, pipeline.ExitOK, run(append(args, "--stack", "local", "-C", "../..", "--json")))
		})
		decode(t, out, v)
		return out
	}

	var outs map[string]any
	jsonOf(&outs, "output")
	assert.Equal(t, map[string]any{"cluster": "milner-local", "nodes": nodes, "kubeconfig": kubeconfig, "talosconfig": talosconfig}, outs)
	var one map[string]any
	jsonOf(&one, "output", "nodes")
	assert.Equal(t, nodes, one, "one output by name")
	var cluster string
	jsonOf(&cluster, "output", "cluster")
	assert.Equal(t, "milner-local", cluster, "a string output is a JSON string")

	for verb, context := range map[string]string{"kubeconfig": "admin@milner-local", "talosconfig": "milner-local"} {
		file := filepath.Join(t.TempDir(), verb)
		doc := jsonOf(&merged{}, verb, "--file", file)
		assert.JSONEq(t, fmt.Sprintf(`{"stack": "local", "file": %q}`, file), doc, verb)
		b, err := os.ReadFile(file)
		require.NoError(t, err, verb)
		assert.Contains(t, string(b), context, "%s: the stack's context, merged", verb)
	}

	var report status.Report
	doc := jsonOf(&report, "status")
	assert.Equal(t, []string{"backend", "certificates", "cluster", "issued", "nodes", "protected", "resourcesByLayer", "stack", "staged"}, jsonKeys(t, doc))
	assert.Equal(t, "local", report.Stack)
	assert.Equal(t, "milner-local", report.Cluster, "milner:cluster.name")
	assert.True(t, strings.HasPrefix(report.Backend, "file://"), report.Backend)
	assert.Equal(t, map[string]int{"other": 1}, report.Resources, "the stack's own resource, in no layer")
	assert.Zero(t, report.Protected)
	assert.Nil(t, report.Versions, "no --versions")

	var backups []engine.Backup
	doc = jsonOf(&backups, "state", "backups")
	require.NotEmpty(t, backups, "the update's checkpoint copy")
	assert.Equal(t, []string{"id", "resources", "time"}, jsonKeys(t, doc))
	for _, b := range backups {
		assert.NotEmpty(t, b.ID)
		assert.False(t, b.Time.IsZero(), "%s: when", b.ID)
	}

	doc = jsonOf(&restored{}, "state", "restore", "--backup", backups[0].ID, "--yes")
	assert.JSONEq(t, fmt.Sprintf(`{"stack": "local", "backup": %q}`, backups[0].ID), doc)
	var after []engine.Backup
	jsonOf(&after, "state", "backups")
	assert.Len(t, after, len(backups)+1, "the replaced state kept as a backup first")
	outs = nil
	jsonOf(&outs, "output")
	assert.Equal(t, "milner-local", outs["cluster"], "the restored state's outputs")

	assert.JSONEq(t, "[]", jsonOf(&[]engine.Holder{}, "state", "locks"), "no lock held: an empty list")
	release, err := st.Lock(ctx)
	require.NoError(t, err)
	defer release()
	var locks []engine.Holder
	doc = jsonOf(&locks, "state", "locks")
	require.Len(t, locks, 1, "Milner's own lock, which this test holds")
	assert.Equal(t, []string{"command", "lock", "pid", "since", "where", "who"}, jsonKeys(t, doc))
	assert.Equal(t, "milner", locks[0].Lock)
	assert.Equal(t, os.Getpid(), locks[0].PID)
	assert.Equal(t, "milner json-test", locks[0].Command)
	assert.True(t, locks[0].Here(), locks[0].Who)
	assert.False(t, locks[0].Since.IsZero())
}

// TestJSONOfEtcdInspect: etcd inspect --json is the meta.json of the file
// it verified, as 'milner etcd snapshot' sealed it: here a real etcd's
// snapshot (tests/etcdtest), sealed for one age key.
func TestJSONOfEtcdInspect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.Start(t)
	_, err := e.Put(ctx, "/registry/configmaps/default/cm", 5)
	require.NoError(t, err)
	snap, err := e.Snapshot(ctx)
	require.NoError(t, err)
	clear, err := etcdbackup.Load(snap)
	require.NoError(t, err)
	defer func() { _ = clear.Close() }()
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	dir := t.TempDir()
	key := filepath.Join(dir, "key.txt")
	require.NoError(t, os.WriteFile(key, []byte(id.String()+"\n"), 0o600))
	sealed := clear.Meta(etcdbackup.Meta{Cluster: "milner-local", Stack: "local", Node: "cp-1", TakenAt: time.Now().UTC().Truncate(time.Second)})
	file, err := clear.Seal(sealed, []age.Recipient{id.Recipient()}, dir, "", false)
	require.NoError(t, err)

	var got etcdbackup.Meta
	out := stdout(t, func() {
		require.Equal(t, pipeline.ExitOK, run([]string{"etcd", "inspect", file, "--identity", key, "--json"}))
	})
	decode(t, out, &got)
	assert.Equal(t, []string{"bytes", "cluster", "format", "hash", "node", "revision", "sha256", "stack", "takenAt", "totalKeys", "totalSize"}, jsonKeys(t, out))
	assert.True(t, sealed.TakenAt.Equal(got.TakenAt), "takenAt: %v, sealed %v", got.TakenAt, sealed.TakenAt)
	got.TakenAt = sealed.TakenAt
	assert.Equal(t, sealed, got)
	assert.Positive(t, got.Revision)
	assert.GreaterOrEqual(t, got.TotalKeys, 5)
	assert.Len(t, got.SHA256, 64)
}

// jsonKeys are the keys of the JSON object doc, or of its array's first
// element, sorted: the names scripts read, which a strict decode into the
// type that printed them cannot see renamed.
func jsonKeys(t *testing.T, doc string) []string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(doc), &v), doc)
	if a, ok := v.([]any); ok && len(a) > 0 {
		v = a[0]
	}
	m, ok := v.(map[string]any)
	require.True(t, ok, "an object: %s", doc)
	return slices.Sorted(maps.Keys(m))
}

// TestJSONOfCheck: check --json is one figure per stack, each rule's
// verdict in conformance.Rules order; the local stack declares the
// substrate layer alone, so the rules of the others do not apply, and
// every rule that applies holds and was checked.
func TestJSONOfCheck(t *testing.T) {
	var figures []conformance.Figure
	out := stdout(t, func() {
		require.Equal(t, pipeline.ExitOK, run([]string{"check", "--stack", "local", "-C", "../..", "--json"}))
	})
	decode(t, out, &figures)
	assert.Equal(t, []string{"results", "stack"}, jsonKeys(t, out), "camelCase, as every verb's")
	require.Len(t, figures, 1)
	assert.Equal(t, "local", figures[0].Stack)
	require.Len(t, figures[0].Results, len(conformance.Rules))
	var applies int
	for i, r := range figures[0].Results {
		assert.Equal(t, conformance.Rules[i].Name, r.Rule)
		if r.Applies {
			applies++
			assert.Empty(t, r.Problems, r.Rule)
			assert.Empty(t, r.Unchecked, r.Rule)
		}
	}
	assert.Positive(t, applies, "the substrate layer's rules")
	assert.Less(t, applies, len(conformance.Rules), "not the other layers'")
}
