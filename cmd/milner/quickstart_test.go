package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
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

// quickStart returns the commands of the README's dev quick start: every
// sh block of its section, in order, continuation lines joined.
func quickStart(t *testing.T, readme string) []string {
	t.Helper()
	var cmds []string
	for _, block := range quickStartBlocks(t, readme) {
		cmds = append(cmds, block.cmds...)
	}
	return cmds
}

// shBlock is one sh block of a Markdown text: its commands (continuation
// lines joined) and the prose before it, back to the previous block.
type shBlock struct {
	before string
	cmds   []string
}

// shBlocks returns the sh blocks of a Markdown text.
func shBlocks(t *testing.T, text string) []shBlock {
	t.Helper()
	var blocks []shBlock
	for {
		before, rest, ok := strings.Cut(text, "```sh\n")
		if !ok {
			return blocks
		}
		body, after, ok := strings.Cut(rest, "```")
		require.True(t, ok, "an unclosed sh block")
		var cmds []string
		for _, l := range strings.Split(strings.ReplaceAll(body, "\\\n", " "), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				cmds = append(cmds, l)
			}
		}
		blocks = append(blocks, shBlock{before: before, cmds: cmds})
		text = after
	}
}

// quickStartSection is the README's dev quick start, its heading to the next.
func quickStartSection(t *testing.T, readme string) string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n"+quickStartHeading+"\n")
	require.True(t, ok, "README has no %q", quickStartHeading)
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// quickStartBlocks returns the sh blocks of the README's dev quick start.
func quickStartBlocks(t *testing.T, readme string) []shBlock {
	t.Helper()
	blocks := shBlocks(t, quickStartSection(t, readme))
	require.NotEmpty(t, blocks, "no sh block under %q", quickStartHeading)
	return blocks
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
	names := append(config.VaultTLSNames("vault", "vault"), "vault.milner.internal") // the dev stack's expose.host
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

// toolTargets reads scripts/tools.sh: for each target, the binaries it
// builds (its case arm's `build NAME` calls).
func toolTargets(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../scripts/tools.sh")
	require.NoError(t, err)
	arm := regexp.MustCompile(`^    ([a-z][a-z-]*)\)`)
	build := regexp.MustCompile(`\bbuild ([a-z][a-z0-9_-]*) `)
	targets := map[string][]string{}
	var cur string
	for _, l := range strings.Split(string(b), "\n") {
		if m := arm.FindStringSubmatch(l); m != nil {
			cur = m[1]
		}
		if cur == "" {
			continue
		}
		for _, m := range build.FindAllStringSubmatch(l, -1) {
			targets[cur] = append(targets[cur], m[1])
		}
		if strings.Contains(l, ";;") {
			cur = ""
		}
	}
	return targets
}

// onFreshDebian are the commands a fresh Debian 12 with Go has: bash and
// its builtins, coreutils, passwd (usermod), openssl (ca-certificates,
// which fetching Go needs, depends on it), and Go itself.
var onFreshDebian = []string{"export", "cd", "kill", "printf", "cat", "install", "id", "usermod", "openssl", "go", "git"}

// commandWords returns the command each simple command of line runs: the
// first word after &&, ||, |, ; and &, past `sudo` and VAR=value; a comment
// ends the line.
func commandWords(line string) []string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	var words []string
	for _, part := range regexp.MustCompile(`&&|\|\||[|;&]`).Split(line, -1) {
		for _, w := range strings.Fields(part) {
			if w == "sudo" || regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(w) {
				continue
			}
			words = append(words, w)
			break
		}
	}
	return words
}

// TestQuickStartInstallsEveryTool: every command the dev quick start runs,
// and the runbooks its "Then:" line sends you to next, is on a fresh
// Debian 12 with Go, is a script of the repository, is milner (the block's
// `go build`), or is built by the block's own `scripts/tools.sh` line. A
// fresh Debian has no make, kubectl or age-keygen: the quick start once
// used all three and installed none.
func TestQuickStartInstallsEveryTool(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(b)
	blocks := quickStartBlocks(t, readme)

	targets := toolTargets(t)
	provided := map[string]string{}
	for _, c := range onFreshDebian {
		provided[c] = "a fresh Debian 12 with Go"
	}
	var lines []string
	for _, bl := range blocks {
		lines = append(lines, bl.cmds...)
	}
	for _, l := range lines {
		words := strings.Fields(l)
		switch {
		case l == "go build -o bin/milner ./cmd/milner":
			provided["milner"] = l
		case len(words) > 1 && words[0] == "scripts/tools.sh":
			for _, target := range words[1:] {
				bins, ok := targets[target]
				require.True(t, ok, "%q: scripts/tools.sh has no target %s", l, target)
				for _, bin := range bins {
					provided[bin] = l
				}
			}
		}
	}
	require.Contains(t, provided, "milner", "the quick start builds bin/milner")
	require.True(t, slices.ContainsFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, "export PATH=$PWD/bin:$PWD/.tools/bin:")
	}), "the quick start puts bin and .tools/bin on PATH")

	// The runbooks the "Then:" paragraph after the block links.
	sources := map[string][]string{"README's quick start": lines}
	_, then, ok := strings.Cut(quickStartSection(t, readme), "\nThen: ")
	require.True(t, ok, "the quick start ends with a Then: paragraph")
	then, _, _ = strings.Cut(then, "\n\n")
	for _, m := range regexp.MustCompile(`\]\((docs/[^)#]+\.md)`).FindAllStringSubmatch(then, -1) {
		doc, err := os.ReadFile(filepath.Join("../..", m[1]))
		require.NoError(t, err)
		for _, bl := range shBlocks(t, string(doc)) {
			sources[m[1]] = append(sources[m[1]], bl.cmds...)
		}
	}
	require.Greater(t, len(sources), 2, "the Then: paragraph links runbooks")

	for src, cmds := range sources {
		for _, l := range cmds {
			for _, c := range commandWords(l) {
				if strings.HasPrefix(c, "scripts/") {
					_, err := os.Stat(filepath.Join("../..", c))
					assert.NoError(t, err, "%s runs %s", src, c)
					continue
				}
				if _, ok := provided[c]; !ok {
					t.Errorf("%s runs %s (%q), which neither a fresh Debian 12 with Go nor the quick start's steps install", src, c, l)
				}
			}
		}
	}
}

// TestQuickStartGroupBeforeExports: `usermod -aG libvirt` takes effect only
// at a new login, which also loses a shell's exports; so the block that
// adds the group ends there, and the exports come in a later block, after
// the README says to log out and in.
func TestQuickStartGroupBeforeExports(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	blocks := quickStartBlocks(t, string(b))
	group, exports := -1, -1
	for i, bl := range blocks {
		for j, l := range bl.cmds {
			if strings.Contains(l, "usermod -aG libvirt") {
				group = i
				assert.Equal(t, len(bl.cmds)-1, j, "usermod ends its block: %q", bl.cmds)
			}
			if strings.HasPrefix(l, "export ") && exports < 0 {
				exports = i
			}
		}
	}
	require.GreaterOrEqual(t, group, 0, "the quick start adds the user to libvirt")
	require.Greater(t, exports, group, "the exports come in a block after the group change")
	assert.Contains(t, blocks[exports].before, "log out and in", "between the group change and the exports, a new login")
}

// TestToolsShLeavesToolsToTheCloneOwner: scripts/tools.sh run as root (the
// local quick start, sudo) in a clone a user owns hands .tools to that
// user, also when it fails, so the user's own run can write there again.
func TestToolsShLeavesToolsToTheCloneOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs scripts/tools.sh as root in a clone owned by nobody")
	}
	const nobody = 65534
	clone := t.TempDir()
	for _, f := range []string{"scripts/tools.sh", "go.mod", "tools/pulumi/go.mod", "tools/kube-apiserver/go.mod"} {
		b, err := os.ReadFile(filepath.Join("../..", f))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(clone, filepath.Dir(f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(clone, f), b, 0o755))
	}
	// What an earlier root run left: a root-owned tool.
	require.NoError(t, os.MkdirAll(filepath.Join(clone, ".tools", "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(clone, ".tools", "bin", "pulumi"), nil, 0o755))
	require.NoError(t, filepath.WalkDir(clone, func(p string, d os.DirEntry, err error) error {
		if err != nil || strings.Contains(p, ".tools") {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}))

	// An unknown target: the script stops (exit 2) after making .tools/bin.
	cmd := exec.Command("/bin/bash", filepath.Join(clone, "scripts", "tools.sh"), "no-such-tool")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	for _, p := range []string{".tools", ".tools/bin", ".tools/bin/pulumi"} {
		fi, err := os.Stat(filepath.Join(clone, p))
		require.NoError(t, err)
		st, ok := fi.Sys().(*syscall.Stat_t)
		require.True(t, ok)
		assert.Equal(t, uint32(nobody), st.Uid, "%s belongs to the clone's owner after a root run", p)
	}
}

// TestCheckNamesAMissingValidator: on a fresh clone (no .tools) `milner
// check --all` says which validator is not built and how to build it; it
// does not refuse the stacks (ExitRefused is "layer rules fail").
func TestCheckNamesAMissingValidator(t *testing.T) {
	clone := t.TempDir()
	files, err := filepath.Glob("../../Pulumi*.yaml")
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(clone, filepath.Base(f)), b, 0o644))
	}
	stderr := captureStderr(t, func() {
		assert.Equal(t, pipeline.ExitError, run([]string{"check", "--all", "-C", clone}))
	})
	assert.Contains(t, stderr, "not built; run scripts/tools.sh talos-validate")
	assert.NotContains(t, stderr, "layer rules fail")
}

// captureStderr returns what f writes to os.Stderr.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	func() {
		defer func() { os.Stderr = saved }()
		f()
	}()
	require.NoError(t, w.Close())
	return <-done
}
