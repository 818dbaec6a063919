// Package clusterapi runs a real etcd and kube-apiserver (scripts/tools.sh
// kubeapi, the pair tests/kubeapi runs) as the control plane a Talos
// cluster's first node would run, for the real-engine scenarios whose Talos
// nodes are tests/talosapi doubles (tests/integration on libvirt,
// tests/pveengine on the PVE double). Only tests import it.
package clusterapi

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	corev1 "k8s.io/api/core/v1"

	"github.com/milner/milner/tests/talosapi"
)

// API is a real etcd and kube-apiserver (scripts/tools.sh kubeapi,
// the pair tests/kubeapi runs) standing in for the control plane a Talos
// node would run: it listens on loopback (port 6443), and the cluster
// endpoint (the VIP, port 6443, where the kubeconfig Talos' Kubeconfig
// call hands out points) reaches it only through the VIP's holder
// (RelayVIP),
// with a serving certificate from the cluster's Kubernetes CA and that CA
// as its client CA, both read from the config the first control plane
// received. It is seeded with what the kubelets and Talos' manifests would
// write (Seed): the Node objects and the control plane's static pods, so
// the provider's cluster.getHealth runs talos pkg/cluster/check's
// DefaultClusterChecks with no check skipped.
type API struct {
	tools string
	dir   string
	procs []*exec.Cmd
	// args are each daemon's arguments, for a restart.
	args   map[string][]string
	client *http.Client
	url    string
	vip    netip.Addr

	mu sync.Mutex
	// asks are the connections to the control planes' own API server
	// addresses (Relay), oldest first.
	asks      []NodeAsk
	listeners []net.Listener
	// restarting holds, per node, until when its API server is down: the
	// kubelet is restarting its static pod (Kubelet).
	restarting map[string]time.Time
	restarts   []Restart
	// live are the relayed connections per node, closed when its API
	// server restarts (a restart drops every client's connection).
	live map[string]map[net.Conn]bool
	// scheduled is the kube-proxy DaemonSet's desired count as the played
	// DaemonSet controller last wrote it (controllers).
	scheduled int
	// ca, admin and adminKey are the cluster CA's and the seeding admin's
	// PEM, for Clientset.
	ca, admin, adminKey []byte
}

// Restart is one restart of a control plane's API server by its kubelet.
type Restart struct {
	Node     string
	Down, Up time.Time
}

// String is one restart, for a log line.
func (r Restart) String() string {
	return fmt.Sprintf("%s down %s up %s", r.Node, r.Down.Format(time.StampMilli), r.Up.Format(time.StampMilli))
}

// Restarts returns the API server restarts so far, oldest first.
func (a *API) Restarts() []Restart {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.restarts)
}

// KubeletTiming is how long the played kubelet takes.
type KubeletTiming struct {
	// Poll is how often the kubelet reads Talos' static-pod server: its
	// httpCheckFrequency, 20 s by default (k8s.io/kubernetes v1.36.3
	// pkg/kubelet/apis/config/v1beta1/defaults.go), which Talos' kubelet
	// config leaves unset (talos v1.13.9
	// internal/app/machined/pkg/controllers/k8s/kubelet_spec.go sets only
	// StaticPodURL).
	Poll time.Duration
	// Restart is how long a kube-apiserver static pod is down between the
	// kubelet stopping the old one and the new one answering Ready.
	Restart time.Duration
	// OrphanGC is how long a pod bound to a deleted Node lives on before
	// the pod garbage collector deletes it: its quarantine, 40 s
	// (k8s.io/kubernetes v1.36.3 pkg/controller/podgc/gc_controller.go
	// quarantineTime).
	OrphanGC time.Duration
	// PodSecond is how long one second of a pod's own spec takes (its
	// preStop sleep, its deletion grace period: pods.go terminated).
	PodSecond time.Duration
}

// RealKubelet is the kubelet's own timing: its default poll, and an API
// server restart of the order of the readiness probe's first success
// (Talos' static pod: initialDelaySeconds 0, periodSeconds 10 at most).
var RealKubelet = KubeletTiming{Poll: 20 * time.Second, Restart: 10 * time.Second, OrphanGC: 40 * time.Second, PodSecond: time.Second}

// CIKubelet is RealKubelet scaled down tenfold, for CI's time.
var CIKubelet = KubeletTiming{Poll: RealKubelet.Poll / 10, Restart: RealKubelet.Restart / 10, OrphanGC: RealKubelet.OrphanGC / 10, PodSecond: RealKubelet.PodSecond / 10}

// NodeAsk is one connection to a control plane's own API server address.
type NodeAsk struct {
	Time time.Time
	Node string
	// Served: the node's API server ran (relayed to the cluster's); else
	// the connection was closed at once.
	Served bool
}

// String is one ask, for a log line.
func (a NodeAsk) String() string {
	return fmt.Sprintf("%s %s served=%v", a.Time.Format(time.StampMilli), a.Node, a.Served)
}

// Start starts etcd and kube-apiserver on loopback (127.0.0.1:6443, its
// certificate naming the VIP too; RelayVIP serves vip:6443)
// from a control plane's machine config, with the binaries of tools
// (a .tools/bin).
func Start(tools, dir string, vip netip.Addr, machineConfig []byte) (*API, error) {
	cfg, err := configloader.NewFromBytes(machineConfig)
	if err != nil {
		return nil, fmt.Errorf("control plane config: %w", err)
	}
	ca := cfg.Cluster().IssuingCA()
	caPair, err := tls.X509KeyPair(ca.Crt, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caPair.Certificate[0])
	if err != nil {
		return nil, err
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err == nil {
			err = os.WriteFile(p, b, 0o600)
		}
		return p
	}
	caFile := write("ca.crt", ca.Crt)
	saFile := write("sa.key", cfg.Cluster().ServiceAccount().Key)
	serving, servingKey, e := issue(caCert, caPair.PrivateKey, "kube-apiserver", nil, []net.IP{vip.AsSlice(), net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth)
	if e != nil {
		return nil, e
	}
	certFile, keyFile := write("apiserver.crt", serving), write("apiserver.key", servingKey)
	policy := write("audit-policy.yaml", []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"))
	admin, adminKey, e := issue(caCert, caPair.PrivateKey, "milner-it-seed", []string{"system:masters"}, nil, x509.ExtKeyUsageClientAuth)
	if e != nil {
		return nil, e
	}
	if err != nil {
		return nil, err
	}
	a := &API{tools: tools, dir: dir, url: "https://" + apiserverAddr, vip: vip, restarting: map[string]time.Time{}, live: map[string]map[net.Conn]bool{}, args: map[string][]string{},
		ca: ca.Crt, admin: admin, adminKey: adminKey}
	if err := a.daemon("etcd", "--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--log-level=warn"); err != nil {
		return nil, err
	}
	if err := a.daemon("kube-apiserver", "--etcd-servers="+etcdURL,
		"--bind-address="+apiserverHost, "--advertise-address="+vip.String(), "--secure-port=6443",
		"--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile, "--client-ca-file="+caFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saFile, "--service-account-signing-key-file="+saFile,
		"--service-cluster-ip-range=10.96.0.0/12", "--authorization-mode=Node,RBAC",
		"--allow-privileged=true", "--endpoint-reconciler-type=none", "--profiling=false", "--v=0",
		"--audit-policy-file="+policy, "--audit-log-path="+filepath.Join(dir, "audit.log")); err != nil {
		a.Stop()
		return nil, err
	}
	cert, err := tls.X509KeyPair(admin, adminKey)
	if err != nil {
		a.Stop()
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	a.client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}
	if err := a.ready(); err != nil {
		a.Stop()
		return nil, err
	}
	return a, a.garbageCollector(caFile, admin, adminKey)
}

// ready waits up to 3 minutes for kube-apiserver's /readyz.
func (a *API) ready() error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		body, code, err := a.Do(http.MethodGet, "/readyz", "", nil)
		if err == nil && code == http.StatusOK && string(body) == "ok" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after 3m: %d %s %w (logs in %s)", code, body, err, a.dir)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// garbageCollector runs kube-controller-manager with its garbage collector
// and its ReplicaSet controller, as the seeding admin: the Kubernetes
// provider deletes with foreground propagation (pulumi-kubernetes'
// default), whose finalizer only the garbage collector removes; and a
// ReplicaSet's pod evicted by a drain is replaced elsewhere by its
// controller (a terminating pod is no longer active: k8s.io/kubernetes
// v1.36.3 pkg/controller/controller_utils.go IsPodActive). The Deployment
// controller stays off: the seeded CoreDNS Deployment stands as Talos'
// manifests wrote it, its Ready pod written by Seed, which a Deployment
// controller would replace with one of its own ReplicaSet's.
func (a *API) garbageCollector(caFile string, crt, key []byte) error {
	b64 := base64.StdEncoding.EncodeToString
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: it, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: it, user: {client-certificate-data: %s, client-key-data: %s}}]
contexts: [{name: it, context: {cluster: it, user: it}}]
current-context: it
`, a.url, caFile, b64(crt), b64(key))
	file := filepath.Join(a.dir, "controller-manager.kubeconfig")
	if err := os.WriteFile(file, []byte(kc), 0o600); err != nil {
		return err
	}
	// No HTTPS endpoint: nothing asks the controller manager.
	return a.daemon("kube-controller-manager", "--kubeconfig="+file, "--leader-elect=false",
		"--secure-port=0", "--controllers=garbagecollector,replicaset", "--v=0")
}

// issue makes a certificate from the CA, returning its PEM and its key's.
func issue(ca *x509.Certificate, caKey any, cn string, orgs []string, ips []net.IP, usage x509.ExtKeyUsage) ([]byte, []byte, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// newKey is a P-256 key, as Talos' own PKI issues.
func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

// daemon starts a binary of a.tools with its output in dir/<name>.log.
func (a *API) daemon(name string, args ...string) error {
	log, err := os.Create(filepath.Join(a.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(a.tools, name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	a.procs = append(a.procs, cmd)
	a.args[name] = args
	return nil
}

// stop stops the daemon name: an interrupt, then a kill after 20 s.
func (a *API) stop(name string) {
	for i, p := range a.procs {
		if filepath.Base(p.Path) != name {
			continue
		}
		_ = p.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
		a.procs = slices.Delete(a.procs, i, i+1)
		return
	}
}

// Relay serves the control plane n's own API server address (its node
// address, port 6443: what internal/apiready asks between two control
// planes' applies) with the cluster's kube-apiserver on loopback, a TCP
// relay, so the TLS session and the server certificate (whose IP SANs
// name the VIP, the kubeconfig's server) are the API server's own. It
// serves while the node's API server would run: the node's double is on,
// reachable and booted, with an etcd member (the static pod reaches etcd
// through it); otherwise a connection is closed at once. Every connection
// is logged (asks).
func (a *API) Relay(n *talosapi.Node) error {
	return a.accept(netip.AddrPortFrom(n.IP(), 6443), n.Name()+"'s API server address", func(conn net.Conn) {
		serves := a.serves(n)
		a.mu.Lock()
		a.asks = append(a.asks, NodeAsk{Time: time.Now(), Node: n.Name(), Served: serves})
		a.mu.Unlock()
		if !serves {
			_ = conn.Close()
			return
		}
		a.carry(n.Name(), conn)
	})
}

// accept listens on addr (named what in its error) until Stop, handing
// each connection to handle.
func (a *API) accept(addr netip.AddrPort, what string, handle func(net.Conn)) error {
	lis, err := net.Listen("tcp", addr.String())
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	a.mu.Lock()
	a.listeners = append(a.listeners, lis)
	a.mu.Unlock()
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			handle(conn)
		}
	}()
	return nil
}

// carry relays conn to the cluster's kube-apiserver as node's API server
// would serve it: counted among node's live connections, so that its
// API server's restart drops it.
func (a *API) carry(node string, conn net.Conn) {
	a.mu.Lock()
	if a.live[node] == nil {
		a.live[node] = map[net.Conn]bool{}
	}
	a.live[node][conn] = true
	a.mu.Unlock()
	go func() {
		defer func() {
			_ = conn.Close()
			a.mu.Lock()
			delete(a.live[node], conn)
			a.mu.Unlock()
		}()
		up, err := net.Dial("tcp", apiserverAddr)
		if err != nil {
			return
		}
		defer func() { _ = up.Close() }()
		go func() { _, _ = io.Copy(up, conn) }()
		_, _ = io.Copy(conn, up)
	}()
}

// serves reports whether n's API server runs: its double on, reachable
// and booted, with an etcd member, and the kubelet not restarting its
// static pod.
func (a *API) serves(n *talosapi.Node) bool {
	st := n.Status()
	a.mu.Lock()
	defer a.mu.Unlock()
	return st.On && st.Reachable && st.Booted && st.EtcdMemberID != 0 && !time.Now().Before(a.restarting[n.Name()])
}

// apiserverHost and apiserverAddr are where the cluster's one
// kube-apiserver listens: loopback, so the VIP answers only through
// RelayVIP and each control plane's address only through Relay.
const (
	apiserverHost = "127.0.0.1"
	apiserverAddr = apiserverHost + ":6443"
)

// RelayVIP serves the cluster endpoint, the VIP's port 6443, as Talos
// does: only the control plane c elected to hold the VIP
// (talosapi.Cluster.VIPHolder; talos v1.13.9 controllers/network/
// operator/vip.go) announces the address, and its own API server answers
// there. While no one holds it, or the holder's API server is down, a
// connection is closed at once. (On a real network nobody answers ARP
// for an unheld VIP, so a client's connect times out instead.)
func (a *API) RelayVIP(c *talosapi.Cluster) error {
	return a.accept(netip.AddrPortFrom(a.vip, 6443), "the VIP's API server address", func(conn net.Conn) {
		h := c.VIPHolder(a.vip)
		if serves := h != nil && a.serves(h); !serves {
			_ = conn.Close()
			return
		}
		// Counted as the holder's: its API server's restart drops it.
		a.carry(h.Name(), conn)
	})
}

// NodeAsks returns the connections to the control planes' own API server
// addresses so far.
func (a *API) NodeAsks() []NodeAsk {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.asks)
}

// Kubelet plays each node's kubelet until done: while a node's double
// runs booted, its Node reports the kubelet version of its running config,
// and on a control plane, at each of the kubelet's polls (timing.Poll,
// from the node's boot), the mirror pod of each static pod Talos wrote
// (talosapi Node.StaticPods) carries that pod's annotations and image and
// runs on the node (hostIP). A changed pod restarts: the mirror pod shows
// the new version not Ready, the API server is down (Relay refuses) for
// timing.Restart, then it is Ready. What `talosctl upgrade-k8s` and the
// wait between control planes look for after each config change: the pod
// with the new talos.dev/config-version on that node Ready, and the
// Node's kubelet version.
func (a *API) Kubelet(c *talosapi.Cluster, done <-chan struct{}, timing KubeletTiming) {
	written := map[string]string{}
	polled := map[string]time.Time{}
	type pending struct {
		path, image, id string
		ip              string
		at              time.Time
	}
	var starting []pending
	var finalized time.Time
	st := &played{orphans: map[string]time.Time{}, terminating: map[string]time.Time{}}
	markReady := func(p pending) error {
		now := time.Now().UTC().Format(time.RFC3339)
		return a.send(http.MethodPatch, p.path+"/status", "application/merge-patch+json", map[string]any{
			"status": map[string]any{"phase": "Running", "hostIP": p.ip, "hostIPs": []any{map[string]any{"ip": p.ip}},
				"conditions": []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": now}},
				"containerStatuses": []any{map[string]any{"name": p.id, "ready": true, "restartCount": 0, "image": p.image, "imageID": "",
					"state": map[string]any{"running": map[string]any{"startedAt": now}}}}},
		})
	}
	for {
		select {
		case <-done:
			return
		case <-time.After(100 * time.Millisecond):
		}
		// Pods whose restart is over are Ready.
		var still []pending
		for _, p := range starting {
			if time.Now().Before(p.at) || markReady(p) != nil {
				still = append(still, p)
			}
		}
		starting = still
		if time.Since(finalized) > 500*time.Millisecond {
			finalized = time.Now()
			a.controllers(c, st, timing)
		}
		for _, n := range c.Nodes() {
			st := n.Status()
			if !st.On || !st.Booted {
				delete(polled, n.Name())
				continue
			}
			raw := n.Config()
			cfg, err := configloader.NewFromBytes(raw)
			if err != nil {
				continue
			}
			version := cfg.Machine().Kubelet().Image()
			version = version[strings.LastIndex(version, ":")+1:]
			if key := "node/" + n.Name(); written[key] != version {
				if a.send(http.MethodPatch, "/api/v1/nodes/"+n.Name()+"/status", "application/merge-patch+json",
					map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"kubeletVersion": version}}}) == nil {
					written[key] = version
				}
			}
			if last, ok := polled[n.Name()]; ok && time.Since(last) < timing.Poll {
				continue
			}
			polled[n.Name()] = time.Now()
			for id, pod := range n.StaticPods() {
				meta, _ := pod["metadata"].(map[string]any)
				containers, _ := pod["spec"].(map[string]any)["containers"].([]any)
				if meta == nil || len(containers) == 0 {
					continue
				}
				image, _ := containers[0].(map[string]any)["image"].(string)
				annotations, _ := meta["annotations"].(map[string]any)
				key, want := "pod/"+id+"-"+n.Name(), fmt.Sprintf("%v %s", annotations, image)
				if written[key] == want {
					continue
				}
				restart := written[key] != "" // a pod the kubelet ran before: stop it, start the new one
				p := pending{path: "/api/v1/namespaces/kube-system/pods/" + id + "-" + n.Name(), image: image, id: id, ip: n.IP().String(), at: time.Now()}
				if restart {
					p.at = p.at.Add(timing.Restart)
					if id == "kube-apiserver" {
						a.mu.Lock()
						a.restarting[n.Name()] = p.at
						a.restarts = append(a.restarts, Restart{Node: n.Name(), Down: time.Now(), Up: p.at})
						for conn := range a.live[n.Name()] {
							_ = conn.Close()
						}
						a.mu.Unlock()
					}
				}
				err := a.send(http.MethodPatch, p.path, "application/strategic-merge-patch+json", map[string]any{
					"metadata": map[string]any{"annotations": annotations},
					"spec":     map[string]any{"containers": []any{map[string]any{"name": id, "image": image}}},
				})
				if err == nil && restart {
					err = a.send(http.MethodPatch, p.path+"/status", "application/merge-patch+json", map[string]any{
						"status": map[string]any{"hostIP": p.ip, "hostIPs": []any{map[string]any{"ip": p.ip}},
							"conditions": []any{map[string]any{"type": "Ready", "status": "False", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}},
					})
					if err == nil {
						starting = append(starting, p)
					}
				} else if err == nil {
					err = markReady(p)
				}
				if err == nil {
					written[key] = want
				}
			}
		}
	}
}

// controllers plays, every half second, what deletes, places and counts
// pods in a real cluster:
//   - the scheduler: a pod no node was chosen for is bound to one (pods.go
//     schedule);
//   - the kubelet: a pod bound to a node that runs is started (Running,
//     Ready: pods.go start); deleted (an eviction sets its
//     deletionTimestamp), it is stopped as the kubelet stops it (its
//     preStop hook, then SIGTERM, within its grace period: pods.go
//     terminated), then removed for good with a zero grace period and its
//     UID as precondition (kubelet v1.36 pkg/kubelet/status/
//     status_manager.go syncPod); without it a drain waits for evicted pods
//     forever;
//   - the pod garbage collector: a pod bound to a Node that no longer
//     exists is deleted once orphaned for timing.OrphanGC (podgc
//     gcOrphaned, after its quarantine);
//   - the DaemonSet controller: kube-proxy's counts follow the Nodes (a
//     deleted Node is no longer scheduled; Talos' health check waits for
//     as many Ready kube-proxy pods as the DaemonSet's desired count).
func (a *API) controllers(c *talosapi.Cluster, st *played, timing KubeletTiming) {
	var nodes corev1.NodeList
	var pods corev1.PodList
	for path, into := range map[string]any{"/api/v1/nodes": &nodes, "/api/v1/pods": &pods} {
		b, code, err := a.Do(http.MethodGet, path, "", nil)
		if err != nil || code != http.StatusOK || json.Unmarshal(b, into) != nil {
			return
		}
	}
	known := map[string]bool{}
	for _, n := range nodes.Items {
		known[n.Name] = true
	}
	if n := len(nodes.Items); n != a.scheduled {
		if a.kubeProxyScheduled(n) == nil {
			a.scheduled = n
		}
	}
	del := func(p corev1.Pod) {
		_, _, _ = a.Do(http.MethodDelete, "/api/v1/namespaces/"+p.Namespace+"/pods/"+p.Name, "",
			map[string]any{"gracePeriodSeconds": 0, "preconditions": map[string]any{"uid": p.UID}})
	}
	running := func(node string) bool {
		n := c.Node(node)
		return n != nil && n.Status().On && n.Status().Booted
	}
	stopping := map[string]bool{}
	for _, p := range pods.Items {
		node, key := p.Spec.NodeName, p.Namespace+"/"+p.Name+"/"+string(p.UID)
		switch {
		case node == "" && p.DeletionTimestamp == nil:
			a.schedule(p, nodes.Items, pods.Items)
		case node == "":
		case !known[node]:
			if _, ok := st.orphans[key]; !ok {
				st.orphans[key] = time.Now()
			} else if time.Since(st.orphans[key]) >= timing.OrphanGC {
				del(p)
			}
		case !running(node):
		case p.DeletionTimestamp != nil:
			stopping[key] = true
			if _, ok := st.terminating[key]; !ok {
				st.terminating[key] = time.Now()
			}
			if time.Since(st.terminating[key]) >= terminated(p, timing.PodSecond) {
				del(p)
			}
		case p.Status.Phase == "" || p.Status.Phase == corev1.PodPending:
			_ = a.start(p, c.Node(node).IP())
		}
	}
	for key := range st.terminating {
		if !stopping[key] {
			delete(st.terminating, key)
		}
	}
}

// played is what the played controllers keep from one round to the next.
type played struct {
	// orphans: when each pod bound to a deleted Node was first seen.
	orphans map[string]time.Time
	// terminating: when the kubelet of a running node first saw each
	// deleted pod (its preStop hook starts then).
	terminating map[string]time.Time
}

// Stop stops the daemons, the last started first.
func (a *API) Stop() {
	a.mu.Lock()
	for _, l := range a.listeners {
		_ = l.Close()
	}
	a.mu.Unlock()
	for len(a.procs) > 0 {
		a.stop(filepath.Base(a.procs[len(a.procs)-1].Path))
	}
}

// Do sends one request as the seeding admin.
func (a *API) Do(method, path, contentType string, body any) ([]byte, int, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.url+path, r)
	if err != nil {
		return nil, 0, err
	}
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return b, resp.StatusCode, err
}

// send is do that wants a 2xx answer.
func (a *API) send(method, path, contentType string, body any) error {
	b, code, err := a.Do(method, path, contentType, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if code/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, code, b)
	}
	return nil
}

// Node is one node as its kubelet registers it.
type Node struct {
	Name         string
	IP           netip.Addr
	ControlPlane bool
}

// Seed writes what a running cluster's kubelets and Talos' bootstrap
// manifests would have written: each Node, registered and Ready (the
// kubelet's status, node-role label on control planes: talos
// pkg/cluster/check K8sAllNodesReportedAssertion, K8sFullControlPlane-
// Assertion, K8sAllNodesReadyAssertion, K8sAllNodesSchedulableAssertion),
// the mirror pods of each control plane's static pods, Ready
// (K8sFullControlPlaneAssertion lists them by k8s-app), and kube-proxy
// (a DaemonSet, one Ready pod per node) and CoreDNS (a Deployment of one
// Ready pod), the two Talos deploys, so those checks do not skip.
func (a *API) Seed(nodes []Node) error {
	selector := func(app string) map[string]any { return map[string]any{"matchLabels": map[string]any{"k8s-app": app}} }
	template := func(app string) map[string]any {
		return map[string]any{"metadata": map[string]any{"labels": map[string]any{"k8s-app": app}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": app, "image": "registry.k8s.io/" + app + ":v1.32.3"}}}}
	}
	errs := []error{a.send(http.MethodPost, "/api/v1/namespaces/kube-system/serviceaccounts", "",
		map[string]any{"metadata": map[string]any{"name": "default"}}),
		a.send(http.MethodPost, "/apis/apps/v1/namespaces/kube-system/daemonsets", "", map[string]any{
			"metadata": map[string]any{"name": "kube-proxy", "labels": map[string]any{"k8s-app": "kube-proxy"}},
			"spec":     map[string]any{"selector": selector("kube-proxy"), "template": template("kube-proxy")},
		})}
	for _, n := range nodes {
		errs = append(errs, a.register(n))
	}
	errs = append(errs, a.kubeProxyScheduled(len(nodes)))
	errs = append(errs, a.send(http.MethodPost, "/apis/apps/v1/namespaces/kube-system/deployments", "", map[string]any{
		"metadata": map[string]any{"name": "coredns", "labels": map[string]any{"k8s-app": "kube-dns"}},
		"spec":     map[string]any{"replicas": 1, "selector": selector("kube-dns"), "template": template("kube-dns")},
	}), a.ReadyPod("kube-system", "coredns-"+nodes[0].Name, "kube-dns", nodes[0].Name, nil))
	return errors.Join(errs...)
}

// Join writes what a node added to the running cluster has written once
// its kubelet started: its Node, registered and Ready, the mirror pods of
// a control plane's static pods, its kube-proxy pod, and the kube-proxy
// DaemonSet's counts with it (Seed's per node). A test calls it when the
// node booted with its first config, as the node's kubelet registers then.
func (a *API) Join(n Node) error {
	if err := a.register(n); err != nil {
		return err
	}
	b, code, err := a.Do(http.MethodGet, "/api/v1/nodes", "", nil)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET /api/v1/nodes: %d %s", code, b)
	}
	var list struct {
		Items []any `json:"items"`
	}
	if err == nil {
		err = json.Unmarshal(b, &list)
	}
	if err != nil {
		return err
	}
	return a.kubeProxyScheduled(len(list.Items))
}

// register writes a node's kubelet's objects: its Node, Ready (the
// kubelet's status, node-role label on control planes: talos
// pkg/cluster/check K8sAllNodesReportedAssertion, K8sFullControlPlane-
// Assertion, K8sAllNodesReadyAssertion, K8sAllNodesSchedulableAssertion),
// the mirror pods of a control plane's static pods, Ready
// (K8sFullControlPlaneAssertion lists them by k8s-app), and its kube-proxy
// pod.
func (a *API) register(n Node) error {
	now := time.Now().UTC().Format(time.RFC3339)
	labels := map[string]any{"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux"}
	if n.ControlPlane {
		labels["node-role.kubernetes.io/control-plane"] = ""
	}
	errs := []error{a.send(http.MethodPost, "/api/v1/nodes", "", map[string]any{"metadata": map[string]any{"name": n.Name, "labels": labels}})}
	errs = append(errs, a.send(http.MethodPatch, "/api/v1/nodes/"+n.Name+"/status", "application/merge-patch+json", map[string]any{
		"status": map[string]any{
			"addresses":  []any{map[string]any{"type": "InternalIP", "address": n.IP.String()}, map[string]any{"type": "Hostname", "address": n.Name}},
			"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}},
		},
	}))
	if n.ControlPlane {
		for _, app := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			// A mirror pod carries the kubelet's config.mirror annotation
			// (kubernetes pkg/kubelet/types ConfigMirrorAnnotationKey),
			// which a drain skips (kubectl pkg/drain filters.go
			// mirrorPodFilter).
			errs = append(errs, a.ReadyPod("kube-system", app+"-"+n.Name, app, n.Name, map[string]any{"annotations": map[string]any{
				"kubernetes.io/config.source": "file", "kubernetes.io/config.mirror": app + "-" + n.Name}}))
		}
	}
	// kube-proxy's pod is its DaemonSet's, which a drain leaves on the node
	// (kubectl pkg/drain filters.go daemonSetFilter).
	b, code, err := a.Do(http.MethodGet, "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", "", nil)
	var ds struct{ Metadata struct{ UID string } }
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET the kube-proxy DaemonSet: %d %s", code, b)
	}
	if err == nil {
		err = json.Unmarshal(b, &ds)
	}
	errs = append(errs, err, a.ReadyPod("kube-system", "kube-proxy-"+n.Name, "kube-proxy", n.Name, map[string]any{"ownerReferences": []any{map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "kube-proxy", "uid": ds.Metadata.UID, "controller": true}}}))
	return errors.Join(errs...)
}

// ReadyPod writes a pod of app (its k8s-app label) in namespace ns on
// node, Running and Ready, with extra metadata.
func (a *API) ReadyPod(ns, name, app, node string, extra map[string]any) error {
	now := time.Now().UTC().Format(time.RFC3339)
	meta := map[string]any{"name": name, "labels": map[string]any{"k8s-app": app}}
	for k, v := range extra {
		meta[k] = v
	}
	return errors.Join(a.send(http.MethodPost, "/api/v1/namespaces/"+ns+"/pods", "", map[string]any{
		"metadata": meta,
		"spec": map[string]any{"nodeName": node, "automountServiceAccountToken": false,
			"containers": []any{map[string]any{"name": app, "image": "registry.k8s.io/" + app + ":v1.32.3"}}},
	}), a.send(http.MethodPatch, "/api/v1/namespaces/"+ns+"/pods/"+name+"/status", "application/merge-patch+json", map[string]any{
		"status": map[string]any{"phase": "Running", "conditions": []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": now}},
			"containerStatuses": []any{map[string]any{"name": app, "ready": true, "restartCount": 0, "image": "registry.k8s.io/" + app + ":v1.32.3", "imageID": "",
				"state": map[string]any{"running": map[string]any{"startedAt": now}}}}},
	}))
}

// kubeProxyScheduled writes the kube-proxy DaemonSet's status: n pods
// scheduled, all Ready.
func (a *API) kubeProxyScheduled(n int) error {
	return a.send(http.MethodPatch, "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy/status", "application/merge-patch+json", map[string]any{
		"status": map[string]any{"desiredNumberScheduled": n, "currentNumberScheduled": n, "numberReady": n, "numberAvailable": n, "updatedNumberScheduled": n, "numberMisscheduled": 0},
	})
}

// Reads returns, per user other than the seeding admin, the requests the
// API server's audit log recorded as "<verb> <resource>" (e.g. "list
// nodes"): who read the cluster, e.g. the health check with the admin
// kubeconfig Talos handed out.
func (a *API) Reads() (map[string][]string, error) {
	b, err := os.ReadFile(filepath.Join(a.dir, "audit.log"))
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var ev struct {
			Stage string `json:"stage"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			Verb      string `json:"verb"`
			ObjectRef struct {
				Resource string `json:"resource"`
			} `json:"objectRef"`
		}
		if json.Unmarshal(line, &ev) != nil || ev.Stage != "ResponseComplete" || ev.User.Username == "milner-it-seed" {
			continue
		}
		if strings.HasPrefix(ev.User.Username, "system:") {
			continue // the API server's own loops
		}
		out[ev.User.Username] = append(out[ev.User.Username], ev.Verb+" "+ev.ObjectRef.Resource)
	}
	return out, nil
}

// Logs returns the tail of a daemon's log, for a failure message.
func (a *API) Logs(name string) string {
	b, _ := os.ReadFile(filepath.Join(a.dir, name+".log")) //nolint:errcheck // a missing log says nothing
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return strings.TrimSpace(string(b))
}
