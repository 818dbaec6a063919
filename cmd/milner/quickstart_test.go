package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/offlinetest"
)

// quickStartHeading is the README section TestQuickStart follows.
const quickStartHeading = "## Quick start: a dev cluster on a KVM workstation"

// quickStart returns the commands of the README's dev quick start: the
// first sh block under its heading, continuation lines joined.
func quickStart(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n"+quickStartHeading+"\n")
	require.True(t, ok, "README has no %q", quickStartHeading)
	_, block, ok := strings.Cut(section, "```sh\n")
	require.True(t, ok, "no sh block under %q", quickStartHeading)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	var cmds []string
	for _, l := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			cmds = append(cmds, l)
		}
	}
	return cmds
}

// shellWords splits a command line the way the shell does for the forms
// the quick start uses: single quotes, double quotes holding $(cat FILE),
// ~ and $HOME. Anything else (pipes, other substitutions) fails the test,
// so the README cannot grow a form this test silently misreads.
func shellWords(t *testing.T, line, home string) []string {
	t.Helper()
	expand := func(s string) string {
		s = strings.ReplaceAll(s, "$HOME", home)
		if s == "~" || strings.HasPrefix(s, "~/") {
			s = home + s[1:]
		}
		return s
	}
	cat := regexp.MustCompile(`^\$\(cat ([^)\s]+)\)`)
	var words []string
	var w strings.Builder
	in := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
			continue
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			require.GreaterOrEqual(t, j, 0, "unclosed ' in %q", line)
			w.WriteString(line[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			j := strings.IndexByte(line[i+1:], '"')
			require.GreaterOrEqual(t, j, 0, "unclosed \" in %q", line)
			q := line[i+1 : i+1+j]
			if m := cat.FindStringSubmatch(q); m != nil {
				require.Equal(t, m[0], q, "only \"$(cat FILE)\" in double quotes: %q", line)
				b, err := os.ReadFile(expand(m[1]))
				require.NoError(t, err, "%q", line)
				// $(...) drops trailing newlines.
				w.WriteString(strings.TrimRight(string(b), "\n"))
			} else {
				require.NotContains(t, q, "$(", "%q", line)
				w.WriteString(q)
			}
			i += j + 1
		case !in && c == '~':
			w.WriteString(home)
		default:
			require.NotContains(t, "|;&`<>", string(c), "a shell form this test does not follow in %q", line)
			w.WriteByte(c)
		}
		in = true
	}
	if in {
		words = append(words, w.String())
	}
	for i, word := range words {
		words[i] = expand(word)
	}
	return words
}

// TestQuickStart follows the README's dev quick start verbatim as far as a
// machine without the Talos provider plugin allows (a dev preview cannot
// finish without it): it runs the README's `milner secrets generate`,
// reads the secrets its `pulumi config set-all` sets, and proves that the
// dev stack with exactly those secrets loads and validates with no refusal,
// and that each generated secret is accepted where it goes: the Vault
// certificate covers exactly the names Vault needs, chains to the CA,
// matches its key and serves TLS to a client that trusts only that CA;
// the values reach the Secrets the charts read.
func TestQuickStart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Chdir("../..") // the README's commands run from the repository root

	secrets := map[string]string{}
	generated, setAll := false, false
	for _, line := range quickStart(t, string(readme)) {
		// Only the steps this machine can run are read as shell words; the
		// others (builds, plugin installs, exports, the engine runs) are
		// what a machine without the Talos plugin cannot follow.
		if !strings.HasPrefix(line, "milner secrets generate ") && !strings.HasPrefix(line, "pulumi config set-all ") {
			continue
		}
		words := shellWords(t, line, home)
		switch {
		case len(words) > 2 && words[0] == "milner" && words[1] == "secrets" && words[2] == "generate":
			require.Equal(t, pipeline.ExitOK, run(words[1:]), "%q", line)
			generated = true
		case len(words) > 3 && words[0] == "pulumi" && words[1] == "config" && words[2] == "set-all":
			for i := 3; i < len(words); i++ {
				if words[i] != "--secret" {
					continue
				}
				i++
				// pulumi splits --secret key=value on the first '='
				// (pkg/v3 cmd/pulumi/config/io.go parseKeyValuePair).
				k, v, ok := strings.Cut(words[i], "=")
				require.True(t, ok, "%q", words[i])
				secrets[k] = v
			}
			setAll = true
		}
	}
	require.True(t, generated, "the quick start runs milner secrets generate")
	require.True(t, setAll, "the quick start sets the secrets with pulumi config set-all")

	// Exactly the secret keys the dev stack needs, no more, no fewer.
	dev, err := stackfile.Read("Pulumi.dev.yaml", nil)
	require.NoError(t, err)
	assert.Equal(t, dev.SecretKeys, slices.Sorted(maps.Keys(secrets)))

	cfg, err := offlinetest.ReadStackConfig("Pulumi.dev.yaml")
	require.NoError(t, err)
	maps.Copy(cfg, secrets)
	rec, err := offline.Run(stacks.Program, "dev", cfg, slices.Sorted(maps.Keys(secrets))...)
	require.NoError(t, err, "the dev stack with the quick start's secrets loads, validates and runs")

	// The Vault certificate: exactly the names Vault needs, signed by the CA, its key.
	names := config.VaultTLSNames("vault", "vault")
	caPEM, certPEM, keyPEM := secrets["milner:vaultTlsCa"], secrets["milner:vaultTlsCert"], secrets["milner:vaultTlsKey"]
	block, _ := pem.Decode([]byte(certPEM))
	require.NotNil(t, block, "vaultTlsCert is PEM")
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	var sans []string
	sans = append(sans, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		sans = append(sans, ip.String())
	}
	assert.ElementsMatch(t, names, sans, "the certificate covers exactly VaultTLSNames")
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM([]byte(caPEM)), "vaultTlsCa is a PEM certificate")
	for _, n := range names {
		host := strings.Replace(n, "*", "vault-0", 1) // a raft peer under the wildcard
		_, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		assert.NoError(t, err, "the CA vouches for %s", host)
	}
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	require.NoError(t, err, "vaultTlsKey is the certificate's key")

	// A real handshake: a server with the pair, a client trusting only the CA,
	// dialling the name clients use.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.WriteString(c, "ok")
			_ = c.Close()
		}
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: names[0], MinVersion: tls.VersionTLS12})
	require.NoError(t, err, "a client trusting only vault-ca.crt accepts Vault's certificate for %s", names[0])
	_ = conn.Close()

	// The CA key stays in the directory (0600, like every generated file),
	// never in the stack.
	dir := filepath.Join(home, ".config", "milner", "dev")
	caKey, err := os.ReadFile(filepath.Join(dir, "vault-ca.key"))
	require.NoError(t, err)
	assert.NotContains(t, slices.Collect(maps.Values(secrets)), strings.TrimRight(string(caKey), "\n"))
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	assert.Len(t, files, 6, "passphrase, agent secret, CA and its key, certificate and its key")
	for _, f := range files {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), f)
	}

	// Each value reaches the Secret its chart reads, exactly. Woodpecker is
	// off in dev (no forge: the forge is the user's), so no Secret of it.
	for _, name := range []string{"woodpecker-server-env", "woodpecker-agent-env"} {
		_, ok := rec.ByName("kubernetes:core/v1:Secret", name)
		assert.False(t, ok, "dev has no forge, so no Woodpecker Secret %s", name)
	}
	for name, want := range map[string]map[string]any{
		"vault-tls": {"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": caPEM},
	} {
		r, ok := rec.ByName("kubernetes:core/v1:Secret", name)
		require.True(t, ok, "a Secret %s is registered", name)
		assert.True(t, r.Inputs["stringData"].ContainsSecrets(), "%s is a secret input", name)
		assert.Equal(t, want, plainValue(r.Inputs["stringData"]), "Secret %s", name)
	}
}

// plainValue is v as plain Go values, secrets unwrapped.
func plainValue(v resource.PropertyValue) any {
	return v.MapRepl(nil, func(v resource.PropertyValue) (any, bool) {
		if v.IsSecret() {
			return plainValue(v.SecretValue().Element), true
		}
		return nil, false
	})
}

// TestSecretsGenerateRefuses: never into the repository, never over a
// secret that exists; either refusal writes nothing.
func TestSecretsGenerateRefuses(t *testing.T) {
	inRepo := filepath.Join("..", "..", "docs", "generated-secrets")
	assert.Equal(t, pipeline.ExitRefused, run([]string{"secrets", "generate", "--stack", "dev", "-C", "../..", "--out", inRepo}))
	_, err := os.Stat(inRepo)
	assert.True(t, os.IsNotExist(err), "nothing created inside the repository")

	out := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(out, "vault.key"), []byte("mine"), 0o600))
	assert.Equal(t, pipeline.ExitRefused, run([]string{"secrets", "generate", "--stack", "dev", "-C", "../..", "--out", out}))
	files, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Len(t, files, 1, "nothing written beside the existing file")
	b, err := os.ReadFile(filepath.Join(out, "vault.key"))
	require.NoError(t, err)
	assert.Equal(t, "mine", string(b))

	link := filepath.Join(t.TempDir(), "repo-link")
	abs, err := filepath.Abs("../..")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(abs, link))
	assert.Equal(t, pipeline.ExitRefused, run([]string{"secrets", "generate", "--stack", "dev", "-C", "../..", "--out", filepath.Join(link, "s")}), "a link into the repository is the repository")
}
