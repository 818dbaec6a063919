//go:build integration

// Package kubeapi runs the apps layer against a real Kubernetes API: etcd and
// kube-apiserver built from their Go modules (scripts/tools.sh kubeapi) on
// loopback, driven by the real Pulumi engine with the real Kubernetes provider
// plugin (scripts/tools.sh kubernetes). No kubelet, scheduler or controller
// manager runs: objects are admitted and stored, nothing is started, so the
// tests never wait for pods.
//
//	go test -tags integration ./tests/kubeapi/ -v
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/milner/milner/tests/testpki"
)

// repo is the repository root.
var repo = func() string {
	r, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return r
}()

// toolsBin holds the pinned binaries scripts/tools.sh builds.
var toolsBin = filepath.Join(repo, ".tools", "bin")

// requireTools fails the test unless the named binaries are in .tools/bin.
func requireTools(t *testing.T, names ...string) {
	t.Helper()
	for _, bin := range names {
		if _, err := os.Stat(filepath.Join(toolsBin, bin)); err != nil {
			t.Fatalf("%v (run scripts/tools.sh pulumi kubeapi kubernetes)", err)
		}
	}
}

// admissionPlugins are the admission plugins the API server runs:
// kube-apiserver's default-on set of v1.34 (k8s.io/kubernetes
// pkg/kubeapiserver/options/plugins.go, DefaultOffAdmissionPlugins). The
// flag adds to that set, so naming them changes nothing but the record:
// here is what the scenarios were admitted by.
// PodSecurity enforces a namespace's pod-security.kubernetes.io/enforce label
// on pods; DefaultStorageClass fills in a PVC's storageClassName.
var admissionPlugins = []string{
	"NamespaceLifecycle", "LimitRanger", "ServiceAccount", "TaintNodesByCondition",
	"PodSecurity", "Priority", "DefaultTolerationSeconds", "DefaultStorageClass",
	"StorageObjectInUseProtection", "PersistentVolumeClaimResize", "RuntimeClass",
	"CertificateApproval", "CertificateSigning", "ClusterTrustBundleAttest",
	"CertificateSubjectRestriction", "DefaultIngressClass", "MutatingAdmissionPolicy",
	"MutatingAdmissionWebhook", "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook",
	"ResourceQuota", "PodTopologyLabels",
}

// apiServer is one running etcd + kube-apiserver pair.
type apiServer struct {
	t *testing.T
	// URL is the API server's https address on loopback.
	URL string
	// Kubeconfig is a kubeconfig of the cluster admin (a client certificate
	// in group system:masters), as the text a stack's milner:kubeconfig holds.
	Kubeconfig string
	client     *http.Client
	dir        string // the daemons' directory: logs, certificates
	pki        pki
}

// startAPIServer starts etcd and kube-apiserver in a temporary directory with
// freshly generated certificates and keys, waits until /readyz answers ok and
// stops both when the test ends. extra are further kube-apiserver flags
// (e.g. the --oidc-* flags of a rendered control-plane config).
func startAPIServer(t *testing.T, extra ...string) *apiServer {
	t.Helper()
	requireTools(t, "etcd", "kube-apiserver")
	start := time.Now()
	dir := t.TempDir()
	pki := newPKI(t, dir)

	etcdClient, etcdPeer := freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcd := daemon(t, dir, "etcd",
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--log-level=warn")

	port := freePort(t)
	apiServerProc := daemon(t, dir, "kube-apiserver", append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + pki.serverCert, "--tls-private-key-file=" + pki.serverKey,
		"--client-ca-file=" + pki.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.saKey,
		"--service-account-signing-key-file=" + pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		// As on Talos, whose CNI and storage pods are privileged: refusing
		// a privileged pod is left to PodSecurity, per namespace.
		"--allow-privileged=true",
		// The "kubernetes" Service's endpoints cannot be a loopback
		// address; nothing here reaches the API through the Service.
		"--endpoint-reconciler-type=none",
		"--enable-admission-plugins=" + strings.Join(admissionPlugins, ","),
		"--profiling=false", "--v=0"}, extra...)...)

	s := &apiServer{t: t, URL: fmt.Sprintf("https://127.0.0.1:%d", port), dir: dir, pki: pki}
	cert, err := tls.LoadX509KeyPair(pki.adminCert, pki.adminKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(readFile(t, pki.caCert))
	s.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}
	s.Kubeconfig = kubeconfig(s.URL, readFile(t, pki.caCert), readFile(t, pki.adminCert), readFile(t, pki.adminKey))

	waitFor(t, "kube-apiserver ready", 3*time.Minute, func() bool {
		body, code, err := s.do(http.MethodGet, "/readyz", nil)
		return err == nil && code == http.StatusOK && string(body) == "ok"
	}, etcd, apiServerProc)
	t.Logf("etcd and kube-apiserver ready at %s in %s", s.URL, time.Since(start).Round(time.Millisecond))
	return s
}

// startControllerManager runs kube-controller-manager (scripts/tools.sh
// kubeapi) against the API server, with its default controllers: the
// StatefulSet, Deployment and ReplicaSet controllers make the Pods and the
// volumeClaimTemplates' PVCs the charts declare (each Pod admitted by the
// API server, or a FailedCreate event on its controller), the service
// account controllers the "default" accounts and their tokens. No
// scheduler or kubelet runs: the Pods stay Pending. It stops with the test.
func (s *apiServer) startControllerManager() {
	t := s.t
	t.Helper()
	requireTools(t, "kube-controller-manager")
	kc := filepath.Join(s.dir, "controller-manager.kubeconfig")
	if err := os.WriteFile(kc, []byte(s.Kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cm := daemon(t, s.dir, "kube-controller-manager",
		"--kubeconfig="+kc,
		"--leader-elect=false",
		// No HTTPS endpoint: nothing here asks the controller manager.
		"--secure-port=0",
		// The service account token controller signs with the key the
		// API server verifies, and hands out the cluster CA.
		"--service-account-private-key-file="+s.pki.saKey,
		"--root-ca-file="+s.pki.caCert,
		"--controllers=*",
		"--v=0")
	// Ready when its service account controller made a namespace's
	// "default" account (every namespace gets one).
	waitFor(t, "kube-controller-manager's default service account", 2*time.Minute, func() bool {
		_, err := s.get("/api/v1/namespaces/default/serviceaccounts/default")
		return err == nil
	}, cm)
}

// proc is a daemon the test started.
type proc struct {
	name, log string
	// exited is closed when the process exits.
	exited <-chan struct{}
}

// daemon starts a binary from .tools/bin with its output in dir/<name>.log and
// stops it (SIGTERM, then SIGKILL) when the test ends.
func daemon(t *testing.T, dir, name string, args ...string) proc {
	t.Helper()
	return daemonAt(t, dir, name, filepath.Join(toolsBin, name), args...)
}

// daemonAt is daemon for the program at path (one this machine installed).
func daemonAt(t *testing.T, dir, name, path string, args ...string) proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // the exit status is the log's to tell
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = log.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s log (last 4 KiB):\n%s", name, tail(b, 4096))
			}
		}
	})
	return proc{name: name, log: logPath, exited: exited}
}

// waitFor polls ok every 500 ms until it holds, and fails the test when
// the timeout passes or a daemon it needs exits first.
func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool, needs ...proc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		for _, p := range needs {
			select {
			case <-p.exited:
				t.Fatalf("waiting for %s: %s exited (its log: %s)", what, p.name, p.log)
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// restConfig is a client configuration for the API server's admin.
func (s *apiServer) restConfig() *rest.Config {
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(s.Kubeconfig))
	if err != nil {
		s.t.Fatal(err)
	}
	return cfg
}

// do sends one request to the API server as the admin and returns the body
// and status code.
func (s *apiServer) do(method, path string, body any) ([]byte, int, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, s.URL+path, r)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return b, resp.StatusCode, err
}

// errNotFound is what get returns for a 404.
var errNotFound = errors.New("not found")

// get decodes the object at path into a generic map.
func (s *apiServer) get(path string) (map[string]any, error) {
	b, code, err := s.do(http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	if code == http.StatusNotFound {
		return nil, fmt.Errorf("GET %s: %w", path, errNotFound)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", path, code, b)
	}
	var obj map[string]any
	return obj, json.Unmarshal(b, &obj)
}

// mustGet is get that fails the test.
func (s *apiServer) mustGet(path string) map[string]any {
	s.t.Helper()
	obj, err := s.get(path)
	if err != nil {
		s.t.Fatal(err)
	}
	return obj
}

// items lists a collection (path may carry a query) and returns its items.
func (s *apiServer) items(path string) []map[string]any {
	s.t.Helper()
	var list struct {
		Items []map[string]any `json:"items"`
	}
	b, code, err := s.do(http.MethodGet, path, nil)
	if err != nil || code != http.StatusOK {
		s.t.Fatalf("GET %s: %d %s %v", path, code, b, err)
	}
	if err := json.Unmarshal(b, &list); err != nil {
		s.t.Fatal(err)
	}
	return list.Items
}

// create POSTs obj to a collection; dryRun asks for admission and
// validation without storing anything. It returns the API server's status
// message on refusal.
func (s *apiServer) create(collection string, obj map[string]any, dryRun bool) (map[string]any, error) {
	path := collection
	if dryRun {
		path += "?dryRun=All"
	}
	b, code, err := s.do(http.MethodPost, path, obj)
	if err != nil {
		return nil, err
	}
	if code != http.StatusCreated && code != http.StatusOK {
		var status struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(b, &status) // a body that is no Status keeps an empty message
		return nil, fmt.Errorf("POST %s: %d: %s", path, code, status.Message)
	}
	var out map[string]any
	return out, json.Unmarshal(b, &out)
}

// pki is the test cluster's certificates and keys, as files.
type pki struct {
	caCert, serverCert, serverKey, adminCert, adminKey, saKey string
}

// newPKI writes a CA, a serving certificate for loopback and the
// in-cluster names, an admin client certificate (group system:masters, which
// RBAC grants everything) and the service-account signing key into dir.
func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	p := pki{
		caCert: filepath.Join(dir, "ca.crt"), serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey: filepath.Join(dir, "apiserver.key"), adminCert: filepath.Join(dir, "admin.crt"),
		adminKey: filepath.Join(dir, "admin.key"), saKey: filepath.Join(dir, "sa.key"),
	}
	now := time.Now()
	ca := testpki.NewCA(now.Add(-time.Hour), now.Add(24*time.Hour))
	server := ca.Server([]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local", "127.0.0.1", "10.96.0.1"}, now.Add(-time.Hour), now.Add(24*time.Hour))
	admin := ca.Client("milner-admin", "system:masters")
	for path, pem := range map[string]string{p.caCert: server.CA, p.serverCert: server.Cert, p.serverKey: server.Key,
		p.adminCert: admin.Cert, p.adminKey: admin.Key, p.saKey: testpki.Key()} {
		if err := os.WriteFile(path, []byte(pem), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kubeconfig is a kubeconfig for server with the certificates inline.
func kubeconfig(server string, ca, cert, key []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubeapi-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: admin@kubeapi-test
  context: {cluster: kubeapi-test, user: admin}
current-context: admin@kubeapi-test
`, server, b64(ca), b64(cert), b64(key))
}

// freePort returns a loopback TCP port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
