package engine

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// asIgnoringHost, set in a child's environment, makes the test binary a
// host started with SIGINT ignored that starts one "plugin": a shell that
// sends itself SIGINT and says whether it survived.
const asIgnoringHost = "MILNER_ENGINE_TEST_IGNORING_HOST"

func TestMain(m *testing.M) {
	if os.Getenv(asIgnoringHost) == "1" {
		pluginsStopOnInterrupt()
		out, _ := exec.Command("sh", "-c", "kill -INT $$; echo survived").CombinedOutput()
		_, _ = os.Stdout.Write(out)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPluginsStopOnInterruptUnderAnIgnoringHost: a host started with SIGINT
// ignored (`trap "" INT` then exec, as `cmd &` of a non-interactive shell
// starts it) still starts its children with the default SIGINT, so a plugin
// stops on the engine's SIGINT instead of costing the 5 s wait.
func TestPluginsStopOnInterruptUnderAnIgnoringHost(t *testing.T) {
	cmd := exec.Command("sh", "-c", `trap "" INT; exec "$0"`, os.Args[0])
	cmd.Env = append(os.Environ(), asIgnoringHost+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("host: %v: %s", err, out)
	}
	if strings.Contains(string(out), "survived") {
		t.Fatalf("the plugin ignored SIGINT: it inherited the host's ignore")
	}
}
