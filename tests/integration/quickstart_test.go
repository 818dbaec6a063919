//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// quickStartHeading is the README section TestQuickStartOnAFreshHome runs
// (cmd/milner TestQuickStart reads the same block, as a unit test).
const quickStartHeading = "## Quick start: a dev cluster on a KVM workstation"

// readmeQuickStart returns the commands of the README's dev quick start:
// the first sh block under its heading, continuation lines joined.
func readmeQuickStart(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+quickStartHeading+"\n")
	if !ok {
		t.Fatalf("README has no %q", quickStartHeading)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatalf("no sh block under %q", quickStartHeading)
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	for _, l := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			cmds = append(cmds, l)
		}
	}
	return cmds
}

// TestQuickStartOnAFreshHome runs the README's dev quick start, each command
// as written, through bash in a fresh HOME (no ~/.pulumi, no backend
// directory, no login) with the pinned CLI from .tools/bin, as far as this
// machine can. The substitutions, each named where it happens:
//   - `make build`: the test builds bin/milner into the project directory
//     (the Go caches are the machine's: a cold cache takes half an hour);
//     `scripts/tools.sh` and `scripts/libvirt-up.sh` ran before the test
//     (TestMain checks the plugin and libvirtd);
//   - `usermod`: the test runs as root, which qemu:///system admits;
//   - the project directory is a copy of Pulumi.yaml and Pulumi.dev.yaml
//     with .tools linked: `stack init` and `set-all` write the stack file,
//     and the repository's must stay as committed;
//   - no `pulumi plugin install`: nothing can be downloaded here.
//
// It stops at `milner preview`: the dev stack's Talos layer needs the
// Talos provider plugin, which cannot be installed here, so the preview
// must fail naming the README's own install command for it. Everything
// from `milner up` on needs a booting Talos node and is not run.
//
// With the Talos plugin built (scripts/tools.sh talos), the preview's
// outcome is only logged: on a machine without /dev/kvm, as this one, the
// libvirt-kvm rule refuses it before anything is planned, naming
// milner:substrate.libvirt.domainType and `domainType: qemu`.
func TestQuickStartOnAFreshHome(t *testing.T) {
	cli := filepath.Join(repo, ".tools", "bin", "pulumi")
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("%v (run scripts/tools.sh pulumi)", err)
	}
	home := t.TempDir()
	project := t.TempDir()
	for _, f := range []string{"Pulumi.yaml", "Pulumi.dev.yaml"} {
		b, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(project, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(repo, ".tools"), filepath.Join(project, ".tools")); err != nil {
		t.Fatal(err)
	}
	goEnv := func(k string) string {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", k, err)
		}
		return strings.TrimSpace(string(out))
	}
	build := exec.Command("go", "build", "-o", filepath.Join(project, "bin", "milner"), "./cmd/milner") // substitutes `make build`
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/milner: %v\n%s", err, out)
	}

	env := []string{
		"HOME=" + home, "USER=root", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"GOCACHE=" + goEnv("GOCACHE"), "GOMODCACHE=" + goEnv("GOMODCACHE"),
		"PULUMI_SKIP_UPDATE_CHECK=true", // no network here
	}
	// sh runs the exports so far and line in bash, in the project directory.
	var exports []string
	sh := func(line string) (string, error) {
		script := strings.Join(append(append([]string{"set -euo pipefail"}, exports...), line), "\n")
		cmd := exec.Command("/bin/bash", "-c", script)
		cmd.Dir, cmd.Env = project, env
		out, err := cmd.CombinedOutput()
		t.Logf("$ %s\n%s", line, out)
		return string(out), err
	}
	lastLine := func(out string) string {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return lines[len(lines)-1]
	}

	_, err := os.Stat(filepath.Join(repo, ".tools", "bin", "pulumi-resource-talos"))
	var fi os.FileInfo
	talosBuilt := err == nil
	ran := map[string]bool{}
	for _, line := range readmeQuickStart(t) {
		word := strings.Fields(line)[0]
		switch {
		case strings.HasPrefix(line, "make build"), strings.HasPrefix(line, "sudo usermod"):
			continue // substituted: see the doc comment
		case word == "export":
			exports = append(exports, line)
			continue
		case strings.HasPrefix(line, "pulumi plugin install"):
			continue // substituted: nothing can be downloaded here; the preview below names this command
		case line == "milner up", line == "milner kubeconfig", line == "kubectl get nodes":
			continue // needs a booting Talos node
		case line == "milner preview" && talosBuilt:
			// The Talos-provider work builds the plugin into .tools/bin:
			// then the preview goes past it (and on to the chart
			// repositories, which are not reachable here).
			out, _ := sh(line)
			if strings.Contains(out, "no resource plugin 'pulumi-resource-talos'") {
				t.Errorf("milner preview: the Talos plugin in .tools/bin was not found")
			}
			t.Logf("milner preview (Talos plugin built): last line: %s", lastLine(out))
			ran[line] = true
			continue
		case line == "milner preview":
			out, err := sh(line)
			if err == nil {
				t.Fatalf("milner preview of dev succeeded without the Talos plugin")
			}
			want := "pulumi plugin install resource talos v0.7.1 --server github://api.github.com/pulumiverse"
			if !strings.Contains(out, "talos: run "+want+" (into Pulumi's plugin cache)") {
				t.Errorf("milner preview: the missing Talos plugin is not answered with %q", want)
			}
			if !slicesContainsLine(readmeQuickStart(t), want) {
				t.Errorf("the README's quick start does not run %q, which milner names", want)
			}
			t.Logf("milner preview: last line: %s", lastLine(out))
			ran[line] = true
			continue
		}
		out, err := sh(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		t.Logf("%s: last line: %s", word, lastLine(out))
		ran[strings.Join(strings.Fields(line)[:2], " ")] = true
	}
	for _, want := range []string{"milner secrets", "install -d", "pulumi stack", "pulumi config", "milner preview"} {
		if !ran[want] {
			t.Errorf("the quick start did not run %q", want)
		}
	}

	// The backend directory: 0700, as the README creates it.
	fi, err = os.Stat(filepath.Join(home, ".pulumi-milner"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("~/.pulumi-milner is %v, want 0700", fi.Mode().Perm())
	}
	stackFile, err := os.ReadFile(filepath.Join(project, "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stackFile), "encryptionsalt: ") || !strings.Contains(string(stackFile), "secure: ") {
		t.Errorf("after stack init and set-all, Pulumi.dev.yaml holds no salt or no secure value:\n%s", stackFile)
	}

	// The README's salted-file rule: a stack file that carries another
	// passphrase's salt makes `pulumi stack init` with a fresh passphrase
	// fail, naming the passphrase.
	other := t.TempDir()
	for _, f := range []string{"Pulumi.yaml", "Pulumi.dev.yaml"} {
		b, err := os.ReadFile(filepath.Join(project, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(other, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pass := filepath.Join(home, "other-passphrase")
	if err := os.WriteFile(pass, []byte("a newcomer's own passphrase\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(home, "other-backend"), 0o700); err != nil {
		t.Fatal(err)
	}
	reinit := exec.Command(cli, "stack", "init", "dev")
	reinit.Dir = other
	reinit.Env = append(env[:len(env):len(env)], "PULUMI_BACKEND_URL=file://"+filepath.Join(home, "other-backend"), "PULUMI_CONFIG_PASSPHRASE_FILE="+pass)
	out, err := reinit.CombinedOutput()
	t.Logf("pulumi stack init dev on a salted file, another passphrase:\n%s", out)
	if err == nil || !strings.Contains(string(out), "incorrect passphrase") {
		t.Errorf("pulumi stack init with another passphrase over a salted stack file: %v, want a failure naming the incorrect passphrase", err)
	}
}

// slicesContainsLine reports whether one of lines starts with prefix.
func slicesContainsLine(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
