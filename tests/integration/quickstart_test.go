//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// quickStartHeading is the README section TestQuickStartOnAFreshHome runs
// (cmd/milner TestQuickStart reads the same block, as a unit test).
const quickStartHeading = "## Quick start: a dev cluster on a KVM workstation"

// readmeQuickStart returns the commands of the README's dev quick start:
// every sh block of its section, in order, continuation lines joined.
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
	section, _, _ = strings.Cut(section, "\n## ")
	var cmds []string
	for {
		_, rest, ok := strings.Cut(section, "```sh\n")
		if !ok {
			break
		}
		var block string
		block, section, _ = strings.Cut(rest, "```")
		for _, l := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				cmds = append(cmds, l)
			}
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("no sh block under %q", quickStartHeading)
	}
	return cmds
}

// quickStartProject is the copy of the working tree the quick start runs
// in: a fixed path, so that the block's `go build` reuses the build cache
// from one run to the next; the integration lock keeps it to one run.
const quickStartProject = "/tmp/milner-quickstart"

// copyWorkingTree copies the repository's files as git lists them (tracked,
// and new ones not ignored), as they are in the working tree, into dst,
// owned like the repository, with .tools linked to the repository's.
func copyWorkingTree(t *testing.T, dst string) {
	t.Helper()
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = repo
	out, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(repo, f)
		fi, err := os.Lstat(src)
		if os.IsNotExist(err) || (err == nil && !fi.Mode().IsRegular()) {
			continue // deleted in the working tree, or a link (.tools)
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(repo, ".tools"), filepath.Join(dst, ".tools")); err != nil {
		t.Fatal(err)
	}
	// scripts/tools.sh run as root hands .tools to the owner of its clone:
	// the copy's owner is the repository's, so .tools stays whose it was.
	fi, err := os.Stat(repo)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if err := os.Chown(dst, int(st.Uid), int(st.Gid)); err != nil {
		t.Fatal(err)
	}
}

// TestQuickStartOnAFreshHome runs the README's dev quick start, each command
// as written, through bash in a fresh HOME (no ~/.pulumi, no backend
// directory, no login), in a copy of the working tree, with Go and the
// system's PATH only, as far as this machine can. Run as written: the
// block's `go build`, its `scripts/tools.sh` line (the tools are up to date
// in the shared .tools, or built), `scripts/libvirt-up.sh`, the exports,
// `secrets generate`, `install`, `stack init`, `set-all`, `milner preview`.
// The substitutions left, each named where it happens:
//   - the project directory is a copy of the working tree (.tools linked):
//     `stack init` and `set-all` write its stack file, and the
//     repository's must stay as committed;
//   - `sudo`: the test runs as root, and this machine has no sudo: a shim
//     on PATH runs its command;
//   - `usermod`: not run (it would change this machine's groups; root
//     needs no group for qemu:///system), and so no new login;
//   - `pulumi plugin install`: not run, nothing can be downloaded here;
//   - `milner up`, `milner kubeconfig`, `kubectl get nodes`: not run, they
//     need a booting Talos node; the test checks instead that kubectl and
//     age-keygen resolve, on the block's PATH, to what its tools line built.
//
// At `milner preview` the dev stack's Talos layer needs the Talos provider
// plugin, which cannot be installed here, so the preview must fail naming
// the README's own install command for it.
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
	project := quickStartProject
	if err := os.RemoveAll(project); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(project) })
	copyWorkingTree(t, project)
	goEnv := func(k string) string {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", k, err)
		}
		return strings.TrimSpace(string(out))
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	shims := t.TempDir()
	if _, err := exec.LookPath("sudo"); err != nil {
		// substitutes sudo: the test runs as root
		if err := os.WriteFile(filepath.Join(shims, "sudo"), []byte("#!/bin/sh\nexec \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	env := []string{
		"HOME=" + home, "USER=root",
		"PATH=" + filepath.Dir(goBin) + ":" + shims + ":/usr/sbin:/usr/bin:/sbin:/bin",
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

	_, err = os.Stat(filepath.Join(repo, ".tools", "bin", "pulumi-resource-talos"))
	var fi os.FileInfo
	talosBuilt := err == nil
	ran := map[string]bool{}
	for _, line := range readmeQuickStart(t) {
		word := strings.Fields(line)[0]
		switch {
		case strings.HasPrefix(line, "sudo usermod"):
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
	for _, want := range []string{"go build", "scripts/tools.sh pulumi", "sudo scripts/libvirt-up.sh", "milner secrets", "install -d", "pulumi stack", "pulumi config", "milner preview"} {
		if !ran[want] {
			t.Errorf("the quick start did not run %q", want)
		}
	}
	// What the block's PATH finds for the tools the steps after it run:
	// the ones its tools line built, not the machine's.
	found, err := sh("command -v milner pulumi kubectl age-keygen")
	if err != nil {
		t.Errorf("the quick start's PATH lacks a tool: %v", err)
	}
	for _, l := range strings.Fields(found) {
		if !strings.HasPrefix(l, project+"/bin/") && !strings.HasPrefix(l, project+"/.tools/bin/") {
			t.Errorf("on the quick start's PATH, %s is not what the block built", l)
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
