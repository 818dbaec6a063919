//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMainJob runs the README's main-job command, `scripts/run.sh`, as a
// user on a fresh shell would: no Pulumi login or backend variable, no
// passphrase, a bare PATH (the script finds Go at /usr/local/go). Only HOME
// is kept, for Go's module and build caches: a cold cache would take this
// 2-core machine half an hour. It must preview the local stack.
func TestMainJob(t *testing.T) {
	home := os.Getenv("HOME")
	pulumiHome := t.TempDir() // no `pulumi login`: the script picks the repo's file backend
	cmd := exec.Command(filepath.Join(repo, "scripts", "run.sh"))
	cmd.Dir = t.TempDir() // the script finds the repo from its own path
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "PULUMI_HOME=" + pulumiHome}
	out, err := cmd.CombinedOutput()
	t.Logf("scripts/run.sh:\n%s", out)
	if err != nil {
		t.Fatalf("scripts/run.sh: %v", err)
	}
	for _, want := range []string{"state in file://" + repo + "/.pulumi/state", "stack local:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("scripts/run.sh output lacks %q", want)
		}
	}
}
