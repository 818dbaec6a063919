//go:build integration && runtime

package kubeapi

import (
	"archive/tar"
	"bytes"
	"context"
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

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/milner/milner/tests/harness"
)

// The real node: its network namespace, its address and its pods' range.
const (
	nodeNetnsEnv = "MILNER_KUBE_NODE_NETNS"
	nodeName     = "milner-node"
	// nodeIP is the node's address on its veth, whose peer (lanIP) sits in
	// a second namespace, the workstation's side of the node network.
	nodeIP  = "10.88.0.2"
	lanIP   = "10.88.0.1"
	podCIDR = "10.244.0.0/24"
	// The namespaces' names before their "-<pid>" (harness.NewNetns).
	nodeNetnsPrefix = "milner-node"
	lanNetnsPrefix  = "milner-lan"
	// lbPoolStart-lbPoolEnd is the load balancer's pool on the node
	// network (milner:loadBalancer.pool), the addresses MetalLB's speaker
	// answers ARP for on the node's link; vaultLBAddress is Vault's
	// (milner:apps[].expose.address), not the pool's first, which MetalLB
	// would give a Service that asked for none.
	lbPoolStart    = "10.88.0.240"
	lbPoolEnd      = "10.88.0.250"
	vaultLBAddress = "10.88.0.245"
	// metallbVersion is the metallb chart 0.16.1's appVersion, the module
	// tools/metallb pins.
	metallbVersion = "v0.16.1"
	// pauseImage is the sandbox image containerd starts each pod with
	// (its config's sandbox_image).
	pauseImage = "registry.k8s.io/pause:3.10"
	// pauseProgram is the stand-in pause image's program.
	pauseProgram = "./tests/kubeapi/images/pause"
)

// hostRuntime are the node's runtime programs, from Debian's packages
// (scripts/ci-deps.sh installs them): containerd 1.6.20, runc 1.1.5 and the
// CNI plugins 1.1.1.
var hostRuntime = []string{"/usr/bin/containerd", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"}

// inNodeNamespace re-runs the calling test in a fresh network namespace
// and returns false, or returns true when already in it. The namespace has
// the node's address on one end of a veth pair (this kernel has no dummy
// interfaces) whose other end is in a second namespace, the workstation's
// side. The test process enters it with `nsenter --net`, which changes only
// the network namespace: `ip netns exec` also gives the process a mount
// namespace of its own with a fresh /sys, where the cgroup hierarchies the
// kubelet and runc need are not mounted.
func inNodeNamespace(t *testing.T) bool {
	t.Helper()
	if harness.InNetns(t, nodeNetnsEnv) {
		return true
	}
	for _, p := range hostRuntime {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v (scripts/ci-deps.sh installs containerd, runc and containernetworking-plugins)", err)
		}
	}
	node, lan := harness.NewNetns(t, nodeNetnsPrefix), harness.NewNetns(t, lanNetnsPrefix)
	for _, args := range [][]string{
		{"-n", node, "link", "add", "eth0", "type", "veth", "peer", "name", "lan0", "netns", lan},
		{"-n", node, "addr", "add", nodeIP + "/24", "dev", "eth0"},
		{"-n", lan, "addr", "add", lanIP + "/24", "dev", "lan0"},
		{"-n", node, "link", "set", "eth0", "up"},
		{"-n", lan, "link", "set", "lan0", "up"},
		{"-n", node, "route", "add", "default", "via", lanIP},
	} {
		harness.IP(t, args...)
	}

	// The namespace reaches no module proxy: build what the scenario
	// builds (milner, the pause image's program) here first.
	harness.Milner(t, repo)
	goBinary(t, pauseProgram)

	harness.Rerun(t, nodeNetnsEnv, node, 40*time.Minute, "nsenter", "--net=/var/run/netns/"+node)
	return false
}

// lanNetns is the name of the workstation's namespace, inside the re-run:
// the same process made it beside the node's, with the same "-<pid>".
func lanNetns() string {
	return lanNetnsPrefix + strings.TrimPrefix(os.Getenv(nodeNetnsEnv), nodeNetnsPrefix)
}

// kubeNode is one real node: containerd and runc from Debian, the CNI
// bridge, a kubelet, kube-proxy, and the cluster's kube-scheduler, with
// an in-process registry that containerd mirrors for the charts'
// registries.
type kubeNode struct {
	t        *testing.T
	api      *apiServer
	dir      string
	sock     string // containerd's CRI socket
	runcRoot string
	registry string // host:port of the in-process registry
}

// startNode starts the node against api and waits until it is Ready. The
// kubelet, kube-proxy and scheduler authenticate as the cluster admin
// (the API server's only client identity here); the kubelet's own API
// admits anonymous requests, answered only inside the namespace.
func (api *apiServer) startNode() *kubeNode {
	t := api.t
	t.Helper()
	requireTools(t, "kubelet", "kube-proxy", "kube-scheduler", "coredns")
	// Not t.TempDir: the kubelet's and containerd's mounts are undone
	// first (the cleanup below), then the directory goes.
	dir, err := os.MkdirTemp("", "milner-node-")
	if err != nil {
		t.Fatal(err)
	}
	n := &kubeNode{t: t, api: api, dir: dir, sock: filepath.Join(dir, "containerd.sock"), runcRoot: filepath.Join(dir, "runc")}
	t.Cleanup(n.cleanup) // runs after the daemons' own cleanups (LIFO)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(nopLogger())), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	n.registry = l.Addr().String()
	n.pushImage(pauseImage, image{entrypoint: []string{"/pause"}, files: map[string]string{"/pause": goBinary(t, pauseProgram)}})

	kc := filepath.Join(dir, "admin.kubeconfig")
	write(t, kc, api.Kubeconfig)
	write(t, filepath.Join(dir, "containerd.toml"), n.containerdConfig())
	write(t, filepath.Join(dir, "cni", "10-pods.conflist"), cniConfig)
	containerd := daemonAt(t, dir, "containerd", "/usr/bin/containerd", "--config", filepath.Join(dir, "containerd.toml"))
	waitFor(t, "containerd's socket", 30*time.Second, func() bool { _, err := os.Stat(n.sock); return err == nil }, containerd)

	write(t, filepath.Join(dir, "resolv.conf"), "nameserver "+lanIP+"\n")
	// The cluster's DNS, which Vault's raft peers find each other by
	// (stacks/vault.go retry_join): CoreDNS at the release Talos deploys
	// (tools/coredns), serving cluster.local from the API server on the
	// node's address, which the kubelet gives the pods as their resolver.
	// Talos runs it as a Deployment behind a Service; here it is a process
	// of the node.
	write(t, filepath.Join(dir, "Corefile"), fmt.Sprintf(`.:53 {
  bind %s
  errors
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig %s
    pods insecure
    fallthrough in-addr.arpa ip6.arpa
    ttl 30
  }
  cache 30
}
`, nodeIP, kc))
	coredns := daemon(t, dir, "coredns", "-conf", filepath.Join(dir, "Corefile"))
	write(t, filepath.Join(dir, "kubelet.yaml"), n.kubeletConfig())
	kubelet := daemon(t, dir, "kubelet", "--config="+filepath.Join(dir, "kubelet.yaml"), "--kubeconfig="+kc,
		"--root-dir="+filepath.Join(dir, "kubelet"), "--cert-dir="+filepath.Join(dir, "kubelet", "pki"),
		"--hostname-override="+nodeName, "--node-ip="+nodeIP, "--v=1")
	daemon(t, dir, "kube-proxy", "--kubeconfig="+kc, "--hostname-override="+nodeName, "--proxy-mode=iptables",
		"--cluster-cidr="+podCIDR, "--masquerade-all",
		// Leave the host-wide conntrack sysctls alone: they are not the
		// namespace's to set.
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0", "--v=0")
	daemon(t, dir, "kube-scheduler", "--kubeconfig="+kc, "--leader-elect=false", "--secure-port=0", "--v=0")

	start := time.Now()
	waitFor(t, "node "+nodeName+" Ready", 2*time.Minute, func() bool {
		node, err := api.get("/api/v1/nodes/" + nodeName)
		return err == nil && condition(node, "Ready") == "True"
	}, kubelet, containerd)
	t.Logf("node %s Ready in %s", nodeName, time.Since(start).Round(time.Millisecond))
	waitFor(t, "CoreDNS answering", 30*time.Second, func() bool {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(nodeIP, "53"))
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := r.LookupHost(ctx, "kubernetes.default.svc.cluster.local")
		return err == nil
	}, coredns)
	return n
}

// containerdConfig is containerd's configuration: its own root, state,
// socket and runc root under the node's directory (nothing shared with a
// containerd the host may run), cgroupfs (the kubelet's driver: containerd
// 1.6 does not answer the CRI RuntimeConfig call, so the kubelet cannot
// ask), the CNI plugins from Debian, and every registry the charts name
// mirrored to the in-process registry. The pods' network namespaces are
// mounted under its state (netns_mounts_under_state_dir), not the host's
// /run/netns.
//
// restrict_oom_score_adj: this machine's root has no CAP_SYS_RESOURCE
// (CapEff 000001fffeffffff, bit 24 clear), so the kernel refuses an
// oom_score_adj below the caller's own: runc 1.1.5's nsexec failed every
// pod sandbox (the kubelet asks -998 for it) with "failed to update
// /proc/self/oom_score_adj: Permission denied", which runc reports as
// "can't get final child's PID from pipe: EOF". containerd's option
// clamps each container's value to no less than its own, as it does for
// rootless containerd.
func (n *kubeNode) containerdConfig() string {
	var mirrors strings.Builder
	for _, r := range []string{"docker.io", "registry.k8s.io", "quay.io", "ghcr.io"} {
		fmt.Fprintf(&mirrors, "[plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.%q]\n  endpoint = [\"http://%s\"]\n", r, n.registry)
	}
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  Root = %[6]q
  SystemdCgroup = false
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = %[7]q
%[8]s`, filepath.Join(n.dir, "containerd"), filepath.Join(n.dir, "containerd-state"), n.sock,
		filepath.Join(n.dir, "opt"), pauseImage, n.runcRoot, filepath.Join(n.dir, "cni"), mirrors.String())
}

// cniConfig is the pods' network: a bridge with the node as gateway and
// host-local addresses from podCIDR.
const cniConfig = `{"cniVersion": "0.4.0", "name": "pods", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + podCIDR + `"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
`

// kubeletConfig is the kubelet's KubeletConfiguration. failCgroupV1: this
// host is cgroup v1, which kubelet v1.36 refuses by default
// (pkg/kubelet/apis/config/validation/validation_linux.go).
func (n *kubeNode) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: %s
readOnlyPort: 0
healthzPort: 0
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [%s]
resolvConf: %s
podLogsDir: %s
evictionHard: {memory.available: 100Mi}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, n.sock, nodeIP, nodeIP, filepath.Join(n.dir, "resolv.conf"), filepath.Join(n.dir, "pods"))
}

// cleanup stops what the daemons left: containerd's shims and their
// containers (runc, by the node's own runc root), then every mount under
// the node's directory, then the directory.
func (n *kubeNode) cleanup() {
	if out, err := exec.Command("runc", "--root", filepath.Join(n.runcRoot, "k8s.io"), "list", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command("runc", "--root", filepath.Join(n.runcRoot, "k8s.io"), "delete", "--force", id).Run()
		}
	}
	_ = exec.Command("pkill", "-f", "containerd-shim-runc-v2 .* -address "+n.sock).Run()
	if out, err := exec.Command("findmnt", "-rn", "-o", "TARGET").Output(); err == nil {
		mounts := strings.Fields(string(out))
		for i := len(mounts) - 1; i >= 0; i-- {
			if strings.HasPrefix(mounts[i], n.dir+"/") {
				_ = exec.Command("umount", "-l", mounts[i]).Run()
			}
		}
	}
	if err := os.RemoveAll(n.dir); err != nil {
		n.t.Logf("node directory %s left: %v", n.dir, err)
	}
}

// image is what pushImage assembles: one layer and the entrypoint.
type image struct {
	entrypoint []string
	// files: a path in the image to a file on this machine, each 0755.
	files map[string]string
	// links: a path in the image to its symlink's target.
	links map[string]string
	// dirs: a directory in the image to its mode (one the programs write
	// to, such as /tmp at 01777).
	dirs map[string]int64
}

// pushImage assembles img and pushes it to the in-process registry under
// ref's repository path, where containerd's mirror asks for it.
func (n *kubeNode) pushImage(ref string, img image) {
	t := n.t
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	made := map[string]bool{}
	dir := func(d string, mode int64) {
		if !made[d] {
			made[d] = true
			must(t, w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: mode}))
		}
	}
	parents := func(path string) {
		var ds []string
		for d := filepath.Dir(path); d != "/"; d = filepath.Dir(d) {
			ds = append([]string{d}, ds...)
		}
		for _, d := range ds {
			dir(d, 0o755)
		}
	}
	for d, mode := range img.dirs {
		parents(d)
		dir(d, mode)
	}
	for path, src := range img.files {
		parents(path)
		data, err := os.ReadFile(src)
		must(t, err)
		must(t, w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path, "/"), Mode: 0o755, Size: int64(len(data))}))
		_, err = w.Write(data)
		must(t, err)
	}
	for link, target := range img.links {
		parents(link)
		must(t, w.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(link, "/"), Linkname: target}))
	}
	must(t, w.Close())
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.Bytes())), nil })
	must(t, err)
	built, err := mutate.AppendLayers(empty.Image, layer)
	must(t, err)
	built, err = mutate.Config(built, v1.Config{Entrypoint: img.entrypoint,
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}})
	must(t, err)
	src, err := name.ParseReference(ref)
	must(t, err)
	dst, err := name.ParseReference(n.registry+"/"+src.Context().RepositoryStr()+":"+src.Identifier(), name.Insecure)
	must(t, err)
	must(t, remote.Write(dst, built))
}

// goBinary builds a main package of this repository as a static binary
// into the test's directory and returns its path.
func goBinary(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v: %s", pkg, err, b)
	}
	return out
}

// condition is the status of an object's condition of type typ ("" when
// it has none).
func condition(obj map[string]any, typ string) string {
	status, _ := obj["status"].(map[string]any)
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

func write(t *testing.T, path, content string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, []byte(content), 0o600))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
