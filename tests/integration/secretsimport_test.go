//go:build integration

package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	tconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v3"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/secretsbundle"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/tests/harness"
)

// TestSecretsImportKeepsTheBundleEncrypted: on a file backend and on
// PostgreSQL, `milner secrets import` of a bundle made by Talos' machinery,
// through the real Talos plugin (pulumi-resource-talos 0.7.1, .tools/bin),
// leaves no key, token or cluster secret of it outside a secret envelope in
// any object the backend holds (checkpoint, .bak, history, backups, locks;
// every row of the table), nor in what milner printed; the state holds the
// very bundle (`milner secrets export` gives it back); a second import is
// refused; and the bundle as the program declares it afterwards previews
// and updates as "same" (no import-replacement: the import id was a
// one-shot), while a goal carrying another import id would replace it.
//
// With the import ignoring talosVersion it records the provider's v1.3
// contract and the contract check refuses.
func TestSecretsImportKeepsTheBundleEncrypted(t *testing.T) {
	if _, err := os.Stat(filepath.Join(repo, ".tools", "bin", "pulumi-resource-talos")); err != nil {
		t.Skipf("%v (scripts/tools.sh talos)", err)
	}
	bin := harness.Milner(t, repo)
	for _, tc := range []struct {
		name  string
		table string // "": a file backend in the project directory
	}{
		{"file", ""},
		{"postgres", "milner_it_secrets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(base, "sec-"+tc.name)
			_ = os.RemoveAll(dir)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			url := "file://" + filepath.Join(dir, "state")
			if err := os.MkdirAll(filepath.Join(dir, "state"), 0o700); err != nil {
				t.Fatal(err)
			}
			objects := func() map[string][]byte { return fileObjects(t, filepath.Join(dir, "state")) }
			if tc.table != "" {
				url = postgresURL(t, tc.table)
				objects = func() map[string][]byte { return postgresObjects(t, url, tc.table) }
				t.Cleanup(func() { _ = postgresURL(t, tc.table) }) // drops the table
			}
			writeSecretsProject(t, dir, "milner-it-sec-"+tc.name)
			env := append(os.Environ(), "PULUMI_BACKEND_URL="+url, "PULUMI_CONFIG_PASSPHRASE="+itPassphrase, "PULUMI_SKIP_UPDATE_CHECK=true")
			milner := func(args ...string) cmdResult {
				t.Helper()
				return runIn(t, dir, env, bin, append([]string{args[0], "--stack", itStack, "-C", dir}, args[1:]...)...)
			}
			// The recovery's empty stack, as the pinned CLI makes it.
			if r := runIn(t, dir, env, filepath.Join(repo, ".tools", "bin", "pulumi"), "--non-interactive", "stack", "init", itStack); r.code != 0 {
				t.Fatalf("pulumi stack init: exit %d:\n%s", r.code, r.out())
			}

			bundle, sealed, key, recipient := exportedBundle(t, dir)
			leaks := needles(bundle)
			r := milner("secrets", "import", "--in", sealed, "--identity", key)
			if r.code != 0 {
				t.Fatalf("milner secrets import: exit %d:\n%s", r.code, r.out())
			}
			if n := findLeaks(map[string][]byte{"milner's output": []byte(r.out())}, leaks); len(n) > 0 {
				t.Errorf("milner secrets import printed a secret:\n%s", strings.Join(n, "\n"))
			}
			scanBackend(t, objects(), leaks)

			// The state records the stack's config contract for the bundle,
			// not the "v1.3" the provider's ImportState sets, so a later up's
			// contract check (cmd/milner checkContract) lets it through.
			recorded := bundleContract(t, dir, env)
			if recorded != "v1.9" {
				t.Errorf("after the import the state records talosVersion %q for the bundle, want the stack's configContract v1.9", recorded)
			}
			if refusals := gate.CheckContract(recorded, "v1.9", false); len(refusals) > 0 {
				t.Errorf("after the import, up would be refused: %v", refusals)
			}

			// The encrypted state holds exactly the bundle.
			out := filepath.Join(dir, "again.age")
			if r := milner("secrets", "export", "--out", out, "--recipient", recipient); r.code != 0 {
				t.Fatalf("milner secrets export: exit %d:\n%s", r.code, r.out())
			}
			if got := openBundle(t, out, key); !reflect.DeepEqual(got, bundle) {
				t.Errorf("the bundle in state is not the one imported:\n got %+v\nwant %+v", got, bundle)
			}

			refused(t, "a second import", milner("secrets", "import", "--in", sealed, "--identity", key), "already holds the secrets bundle")

			// The bundle as the program declares it from now on (no import
			// id) is unchanged: a preview and an up plan "same".
			st := openWith(t, dir, url, stacks.SecretsBundle(""))
			for _, op := range []func(context.Context) (*engine.Result, error){
				func(ctx context.Context) (*engine.Result, error) {
					r, _, err := st.Preview(ctx, engine.PlanOptions{})
					return r, err
				},
				st.Up,
			} {
				res, err := op(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if ch := res.Changes(); len(ch) > 0 || !hasStep(res, apitype.OpSame) {
					t.Errorf("after the import: want the bundle unchanged, got %s", steps(res.Steps))
				}
			}
			scanBackend(t, objects(), leaks) // the up wrote a checkpoint, history and a backup

			// What the one-shot import avoids: a goal whose import id differs
			// from the recorded one plans an import-replacement of the
			// bundle (pkg/v3 step_generator.go isImport).
			other := filepath.Join(dir, "other.yaml")
			plain, err := secretsbundle.Marshal(bundle)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(other, plain, 0o600); err != nil {
				t.Fatal(err)
			}
			res, _, err := openWith(t, dir, url, stacks.SecretsBundle(other)).Preview(context.Background(), engine.PlanOptions{})
			if err != nil {
				t.Logf("preview with another import id: %v", err)
			}
			if res == nil || !hasStep(res, apitype.OpImportReplacement) {
				t.Errorf("preview with another import id: want an import-replacement of the bundle, got %v", res)
			}
		})
	}
}

// bundleContract is the talosVersion input the state records for the
// secrets bundle, as the pinned CLI's `pulumi stack export` reads it.
func bundleContract(t *testing.T, dir string, env []string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(repo, ".tools", "bin", "pulumi"), "--non-interactive", "stack", "export", "--stack", itStack)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pulumi stack export: %v", err)
	}
	var dep apitype.UntypedDeployment
	var state apitype.DeploymentV3
	if err := json.Unmarshal(out, &dep); err != nil {
		t.Fatalf("pulumi stack export: %v", err)
	}
	if err := json.Unmarshal(dep.Deployment, &state); err != nil {
		t.Fatalf("pulumi stack export: %v", err)
	}
	for _, r := range state.Resources {
		if string(r.Type) == gate.TypeTalosSecrets {
			v, _ := r.Inputs["talosVersion"].(string)
			return v
		}
	}
	t.Fatal("pulumi stack export: no secrets bundle in the state")
	return ""
}

// hasStep reports whether r steps the bundle with op.
func hasStep(r *engine.Result, op apitype.OpType) bool {
	return slices.ContainsFunc(r.Steps, func(s gate.Step) bool { return s.Type == gate.TypeTalosSecrets && s.Op == op })
}

// writeSecretsProject writes a project directory (the repo's Pulumi.yaml
// and .tools, a stack file) whose stack declares the Talos layer of a
// libvirt cluster; nothing in it is ever created.
func writeSecretsProject(t *testing.T, dir, cluster string) {
	t.Helper()
	project, err := os.ReadFile(filepath.Join(repo, "Pulumi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), project, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(repo, ".tools"), filepath.Join(dir, ".tools")); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"config": map[string]any{
		"milner:cluster": map[string]any{"name": cluster, "talosVersion": "v1.9.5", "configContract": "v1.9", "kubernetesVersion": "v1.32.3", "vip": "10.199.99.240"},
		"milner:substrate": map[string]any{"kind": "libvirt", "libvirt": map[string]any{
			"uri": uri, "domainType": "qemu", "poolPath": filepath.Join(dir, "pool"), "bootImage": filepath.Join(dir, "boot.qcow2"),
		}},
		"milner:network": map[string]any{"mode": "isolated", "cidr": "10.199.99.0/24", "dhcpRange": map[string]any{"start": "10.199.99.100", "end": "10.199.99.199"}},
		"milner:nodes": []any{
			map[string]any{"name": "cp-1", "role": "controlplane", "vcpu": 1, "memoryMiB": 2048, "osDiskGiB": 10, "dataDiskGiB": 1, "address": "10.199.99.11", "mac": "52:54:00:c7:63:11"},
		},
		"milner:stopAfter": "talos",
	}}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Pulumi."+itStack+".yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// exportedBundle makes a bundle with Talos' machinery and writes it as
// `milner secrets export` does (age-encrypted), with its age key: the
// bundle, the file, the key file and the key's recipient.
func exportedBundle(t *testing.T, dir string) (b *secrets.Bundle, sealed, key, recipient string) {
	t.Helper()
	contract, err := tconfig.ParseContractFromVersion("v1.9")
	if err != nil {
		t.Fatal(err)
	}
	if b, err = secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract); err != nil {
		t.Fatal(err)
	}
	b.Clock = nil
	plain, err := secretsbundle.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	enc, err := secretsbundle.Encrypt(plain, []string{id.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	sealed, key = filepath.Join(dir, "bundle.age"), filepath.Join(dir, "key.txt")
	if err := os.WriteFile(sealed, enc, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return b, sealed, key, id.Recipient().String()
}

// openBundle decrypts and reads an exported bundle.
func openBundle(t *testing.T, file, key string) *secrets.Bundle {
	t.Helper()
	sealed, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	k, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := secretsbundle.Decrypt(sealed, bytes.NewReader(k))
	if err != nil {
		t.Fatal(err)
	}
	b, err := secretsbundle.Parse(plain)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// needles are the bundle's secrets as the provider stores them (base64 of
// the keys' PEM) and as they are (tokens, the cluster secret), and the PEM
// marker of any private key.
func needles(b *secrets.Bundle) []string {
	b64 := base64.StdEncoding.EncodeToString
	all := []string{
		"PRIVATE KEY",
		b64(b.Certs.OS.Key), b64(b.Certs.K8s.Key), b64(b.Certs.Etcd.Key), b64(b.Certs.K8sAggregator.Key), b64(b.Certs.K8sServiceAccount.Key),
		b.Cluster.Secret, b.Secrets.BootstrapToken, b.Secrets.SecretboxEncryptionSecret, b.TrustdInfo.Token,
	}
	return slices.DeleteFunc(all, func(s string) bool { return len(s) < 16 }) // an empty or short one would match anything
}

// scanBackend fails the test if any object holds a secret outside a
// secret envelope, or if no object holds the bundle at all.
func scanBackend(t *testing.T, objects map[string][]byte, leaks []string) {
	t.Helper()
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range objects {
			if !yield(k) {
				return
			}
		}
	})
	t.Logf("scanned %d objects: %s", len(objects), strings.Join(names, ", "))
	holders := 0
	for _, b := range objects {
		if bytes.Contains(b, []byte(gate.TypeTalosSecrets)) {
			holders++
		}
	}
	if holders == 0 {
		t.Fatalf("no object of the backend holds the bundle (%d objects)", len(objects))
	}
	if found := findLeaks(objects, leaks); len(found) > 0 {
		t.Errorf("the backend holds the bundle's secrets outside secret envelopes:\n%s", strings.Join(found, "\n"))
	}
}

// findLeaks lists where an object holds a needle, or a JSON string outside
// a secret envelope that is a PEM private key or the base64 of one.
func findLeaks(objects map[string][]byte, leaks []string) []string {
	var out []string
	for name, b := range objects {
		for _, n := range leaks {
			if bytes.Contains(b, []byte(n)) {
				out = append(out, fmt.Sprintf("%s: holds %.24q...", name, n))
			}
		}
		var doc any
		if json.Unmarshal(b, &doc) == nil {
			walkClear(doc, func(s string) {
				if dec, err := base64.StdEncoding.DecodeString(s); strings.Contains(s, "PRIVATE KEY") || (err == nil && bytes.Contains(dec, []byte("PRIVATE KEY"))) {
					out = append(out, fmt.Sprintf("%s: a private key in the clear (%.24q...)", name, s))
				}
			})
		}
	}
	slices.Sort(out)
	return out
}

// walkClear calls f with every string of v outside Pulumi's secret
// envelopes ({"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": ...}).
func walkClear(v any, f func(string)) {
	switch v := v.(type) {
	case map[string]any:
		if v["4dabf18193072939515e22adb298388d"] == "1b47061264138c4ac30d75fd1eb44270" {
			return
		}
		for _, e := range v {
			walkClear(e, f)
		}
	case []any:
		for _, e := range v {
			walkClear(e, f)
		}
	case string:
		f(v)
	}
}

// fileObjects reads every file of a file backend, gunzipped.
func fileObjects(t *testing.T, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out[rel] = gunzip(t, rel, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// postgresObjects reads every row of the backend's table (key, and the
// object the blob driver stores base64 in data->>'data'), gunzipped.
func postgresObjects(t *testing.T, url, table string) map[string][]byte {
	t.Helper()
	dsn, _, _ := strings.Cut(url, "&table=")
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	rows, err := db.Query("SELECT key, data::text, coalesce(data->>'data', '') FROM " + table) //nolint:gosec // the test's own table name
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	out := map[string][]byte{}
	for rows.Next() {
		var key, raw, data string
		if err := rows.Scan(&key, &raw, &data); err != nil {
			t.Fatal(err)
		}
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			t.Fatalf("row %s: data is not base64: %v", key, err)
		}
		out[key] = gunzip(t, key, b)
		out[key+" (row)"] = []byte(raw)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// gunzip returns b, decompressed when it is gzip.
func gunzip(t *testing.T, name string, b []byte) []byte {
	t.Helper()
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		return b
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// openWith opens the project's stack on the backend with program.
func openWith(t *testing.T, dir, url string, program pulumi.RunFunc) *engine.Stack {
	t.Helper()
	st, err := engine.Open(context.Background(), engine.Options{
		Stack: itStack, Dir: dir, Backend: url, Passphrase: itPassphrase, Program: program, Progress: harness.LogWriter(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// runIn runs a command in dir with env and logs what it printed.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) cmdResult {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	r := exitResult(t, name+" "+strings.Join(args, " "), cmd.Run(), &stdout, &stderr)
	t.Logf("%s %s: exit %d in %s\n--- stdout\n%s--- stderr\n%s", filepath.Base(name), strings.Join(args, " "), r.code,
		time.Since(start).Round(time.Millisecond), r.stdout, r.stderr)
	return r
}
