//go:build integration && runtime

package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	"github.com/milner/milner/tests/harness"
)

// vaultVersion is the vault chart 0.29.1's appVersion, the module
// tools/vault pins and the image tag the chart asks for.
const vaultVersion = "1.18.1"

// dumbInitProgram is the stand-in dumb-init of the Vault image.
const dumbInitProgram = "./tests/kubeapi/images/dumb-init"

// busybox is an image of Debian's busybox-static (a stand-in for the Docker
// Hub image of the same program) with the named applets linked in /bin.
func busybox(applets ...string) image {
	img := image{files: map[string]string{"/bin/busybox": "/bin/busybox"}, links: map[string]string{}}
	for _, a := range applets {
		img.links["/bin/"+a] = "busybox"
	}
	return img
}

// vaultImage is hashicorp/vault:1.18.1 as its Dockerfile (vault v1.18.1,
// target "default") lays it out: the vault binary in /bin (built from the
// module, tools/vault), the module's own .release/docker/docker-entrypoint.sh
// as the entrypoint, and /vault/{logs,file,config}. Alpine is replaced by
// busybox with the applets the chart's command and the entrypoint run (sh,
// cp, sed, grep, id), and dumb-init by a stand-in that runs its arguments
// in its place (tests/kubeapi/images/dumb-init). /tmp is there, writable by
// all, for the chart's copy of its config.
func vaultImage(t *testing.T) image {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/hashicorp/vault")
	cmd.Dir = filepath.Join(repo, "tools", "vault")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the vault module's directory (scripts/tools.sh vault downloads it): %v", err)
	}
	img := busybox("sh", "cp", "sed", "grep", "id")
	img.files["/bin/vault"] = filepath.Join(toolsBin, "vault")
	img.files["/usr/local/bin/docker-entrypoint.sh"] = filepath.Join(strings.TrimSpace(string(out)), ".release", "docker", "docker-entrypoint.sh")
	img.files["/usr/bin/dumb-init"] = goBinary(t, dumbInitProgram)
	img.dirs = map[string]int64{"/tmp": 0o1777, "/vault/logs": 0o755, "/vault/file": 0o755, "/vault/config": 0o755}
	img.entrypoint = []string{"docker-entrypoint.sh"}
	return img
}

// runVault takes the three Vault pods of namespace "vault" through the
// runbook (docs/runbooks/vault.md): initialise in vault-0 (`vault operator
// init` in the pod), then for each pod a port-forward and `milner vault
// unseal` with three of the five shares from a pipe, then `milner vault
// status`; vault-1 and vault-2 join vault-0's raft cluster on their own
// (retry_join, over TLS with Milner's CA), which their unseal completes.
// It returns the raft peers as `vault operator raft list-peers` prints them.
func runVault(t *testing.T, api *apiServer, caPEM string) string {
	t.Helper()
	pods := []string{"vault-0", "vault-1", "vault-2"}
	var init struct {
		Keys      []string `json:"unseal_keys_b64"`
		RootToken string   `json:"root_token"`
	}
	// The listener answers once the pod runs; init until it does.
	var out string
	waitFor(t, "vault operator init in vault-0", time.Minute, func() bool {
		var err error
		out, err = api.exec("vault", "vault-0", "vault", "vault", "operator", "init", "-key-shares=5", "-key-threshold=3", "-format=json")
		if err != nil {
			t.Logf("vault operator init: %v: %s", err, out)
			return false
		}
		return true
	})
	must(t, json.Unmarshal([]byte(out), &init))
	if len(init.Keys) != 5 || init.RootToken == "" {
		t.Fatalf("vault operator init: %d shares, root token %t", len(init.Keys), init.RootToken != "")
	}
	t.Logf("vault-0: initialised, 5 shares, threshold 3")
	shares := strings.Join(init.Keys[:3], "\n") + "\n"
	ca := filepath.Join(t.TempDir(), "vault-ca.crt")
	write(t, ca, caPEM)

	for _, pod := range pods {
		addr := fmt.Sprintf("https://127.0.0.1:%d", api.forward(t, "vault", pod, 8200))
		// A follower reports itself initialised only once its retry_join
		// has the leader's challenge (vault/init.go Initialized,
		// isRaftUnseal): until then `milner vault unseal` refuses it.
		waitFor(t, pod+" unsealed by milner vault unseal", 2*time.Minute, func() bool {
			code, out := milnerVault(t, shares, "unseal", "--addr", addr, "--ca-file", ca, "--shares-file", "-")
			t.Logf("%s: milner vault unseal: exit %d: %s", pod, code, strings.TrimSpace(out))
			return code == 0
		})
		waitFor(t, pod+" unsealed in milner vault status", time.Minute, func() bool {
			code, out := milnerVault(t, "", "status", "--addr", addr, "--ca-file", ca)
			t.Logf("%s: milner vault status: exit %d: %s", pod, code, strings.TrimSpace(out))
			return code == 0
		})
	}

	// list-peers prints "Node Address State Voter", a row per server.
	var peers string
	waitFor(t, "three raft voters", time.Minute, func() bool {
		var err error
		peers, err = api.exec("vault", "vault-0", "vault", "sh", "-c", `VAULT_TOKEN="$0" vault operator raft list-peers`, init.RootToken)
		voters := 0
		for _, line := range strings.Split(peers, "\n") {
			if f := strings.Fields(line); len(f) == 4 && f[3] == "true" {
				voters++
			}
		}
		if err != nil || voters != 3 {
			t.Logf("vault operator raft list-peers: %v\n%s", err, peers)
		}
		return err == nil && voters == 3
	})
	return peers
}

// milnerVault runs `milner vault <args>` with stdin and returns its exit
// code and output.
func milnerVault(t *testing.T, stdin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(harness.Milner(t, repo), append([]string{"vault"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out)
	}
	must(t, err)
	return 0, string(out)
}

// exec runs a command in a pod's container through the API server and the
// kubelet (what `kubectl exec` does) and returns its output.
func (api *apiServer) exec(ns, pod, container string, command ...string) (string, error) {
	cfg := api.restConfig()
	req := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient().Post().
		Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, req.URL())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// forward forwards a loopback port to a pod's port through the API server
// and the kubelet (what `kubectl port-forward` does) until the test ends,
// and returns the local port.
func (api *apiServer) forward(t *testing.T, ns, pod string, port int) uint16 {
	t.Helper()
	cfg := api.restConfig()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	must(t, err)
	url := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient().Post().
		Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, os.Stderr)
	must(t, err)
	failed := make(chan error, 1)
	go func() { failed <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-failed:
		t.Fatalf("port-forward to %s/%s:%d: %v", ns, pod, port, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("port-forward to %s/%s:%d: not ready after 30s", ns, pod, port)
	}
	t.Cleanup(func() { close(stop) })
	ports, err := fw.GetPorts()
	must(t, err)
	return ports[0].Local
}
