package upgrade

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	cosiserver "github.com/cosi-project/runtime/pkg/state/protobuf/server"
	sidx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/milner/milner/components/vocab"
)

// The fake cluster: one gRPC server per node on a loopback TLS listener,
// speaking Talos' machine API (machinery's generated MachineServiceServer)
// and COSI state API (cosi-project's own protobuf server over an in-memory
// state), with the mutual TLS a talosconfig asks for. The code under test
// reaches it through machinery's real client, built from a talosconfig
// file, exactly as against a cluster.

// fakeNode is one scripted node.
type fakeNode struct {
	machine.UnimplementedMachineServiceServer
	fc    *fakeCluster
	name  string
	role  vocab.Role
	state state.State

	// Guarded by fc.mu.
	version   string
	bootID    int
	memberID  uint64
	rebooting bool
	downReads int // boot-id reads that fail while rebooting
	// Script.
	upgradeErr    error  // Upgrade answers this
	comesBackOn   string // version after reboot; default: the image's tag
	readyAfter    bool   // MachineStatus ready after reboot
	etcdErrsAfter []string
	// etcdDown makes EtcdMemberList fail, as on a node whose etcd does not
	// run (a stand-in: the real error text is machined's, not reproduced).
	etcdDown bool
	// learner: its etcd member is not promoted yet (fake_day2_test.go).
	learner bool
	// srv serves the node; stopping it makes the node dead (fake_day2_test.go).
	srv *grpc.Server
	// shutDown is set by Shutdown (fake_day2_test.go).
	shutDown bool
}

// fakeCluster is the nodes and the journal of what was asked.
type fakeCluster struct {
	mu      sync.Mutex
	nodes   []*fakeNode
	journal []string
	// violations are Upgrade calls made while another node was rebooting.
	violations []string
}

func (fc *fakeCluster) log(format string, args ...any) {
	fc.journal = append(fc.journal, fmt.Sprintf(format, args...))
}

// upgrades returns the Upgrade calls of the journal, in order.
func (fc *fakeCluster) upgrades() []string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var out []string
	for _, e := range fc.journal {
		if strings.Contains(e, " Upgrade ") {
			out = append(out, e)
		}
	}
	return out
}

func (fc *fakeCluster) node(name string) *fakeNode {
	for _, n := range fc.nodes {
		if n.name == name {
			return n
		}
	}
	panic("no node " + name)
}

func (n *fakeNode) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	n.fc.mu.Lock()
	defer n.fc.mu.Unlock()
	if n.rebooting {
		return nil, status.Error(codes.Unavailable, "rebooting")
	}
	return &machine.VersionResponse{Messages: []*machine.Version{{Version: &machine.VersionInfo{Tag: n.version}}}}, nil
}

func (n *fakeNode) Upgrade(_ context.Context, req *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	n.fc.mu.Lock()
	defer n.fc.mu.Unlock()
	n.fc.log("%s Upgrade image=%s preserve=%t stage=%t force=%t", n.name, req.GetImage(), req.GetPreserve(), req.GetStage(), req.GetForce())
	for _, o := range n.fc.nodes {
		if o.rebooting {
			n.fc.violations = append(n.fc.violations, fmt.Sprintf("%s upgraded while %s reboots", n.name, o.name))
		}
	}
	if n.upgradeErr != nil {
		return nil, n.upgradeErr
	}
	if n.comesBackOn == "" {
		n.comesBackOn = req.GetImage()[strings.LastIndex(req.GetImage(), ":")+1:]
	}
	n.rebooting, n.downReads = true, 2
	n.setStatus(runtime.MachineStageRebooting, false)
	return &machine.UpgradeResponse{Messages: []*machine.Upgrade{{Ack: "Upgrade request received", ActorId: "actor"}}}, nil
}

// Read serves only the boot ID; while rebooting it fails downReads times,
// then the node comes back on comesBackOn.
func (n *fakeNode) Read(req *machine.ReadRequest, srv machine.MachineService_ReadServer) error {
	if req.GetPath() != bootIDPath {
		return status.Errorf(codes.NotFound, "%s", req.GetPath())
	}
	n.fc.mu.Lock()
	if n.rebooting {
		if n.downReads > 0 {
			n.downReads--
			n.fc.mu.Unlock()
			return status.Error(codes.Unavailable, "rebooting")
		}
		n.rebooting = false
		n.bootID++
		n.version = n.comesBackOn
		n.fc.log("%s booted %s", n.name, n.version)
		n.setStatus(runtime.MachineStageRunning, n.readyAfter)
	}
	id := fmt.Sprintf("boot-%s-%d", n.name, n.bootID)
	n.fc.mu.Unlock()
	return srv.Send(&common.Data{Bytes: []byte(id + "\n")})
}

// Kubeconfig is what upstream's upgrade-k8s asks first (for its
// Kubernetes client); the fake journals it and serves none.
func (n *fakeNode) Kubeconfig(*emptypb.Empty, machine.MachineService_KubeconfigServer) error {
	n.fc.mu.Lock()
	defer n.fc.mu.Unlock()
	n.fc.log("%s Kubeconfig", n.name)
	return status.Error(codes.Unimplemented, "method Kubeconfig not implemented")
}

func (n *fakeNode) EtcdMemberList(context.Context, *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	n.fc.mu.Lock()
	defer n.fc.mu.Unlock()
	n.fc.log("%s EtcdMemberList", n.name)
	if n.etcdDown {
		return nil, status.Error(codes.Unavailable, "etcd is not running")
	}
	var members []*machine.EtcdMember
	for _, o := range n.fc.nodes {
		if o.role == vocab.RoleControlPlane && o.memberID != 0 {
			members = append(members, &machine.EtcdMember{Id: o.memberID, Hostname: o.name, IsLearner: o.learner})
		}
	}
	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{{Members: members}}}, nil
}

func (n *fakeNode) EtcdStatus(context.Context, *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	n.fc.mu.Lock()
	defer n.fc.mu.Unlock()
	if n.rebooting {
		return nil, status.Error(codes.Unavailable, "rebooting")
	}
	var errs []string
	if n.bootID > 0 {
		errs = n.etcdErrsAfter
	}
	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{MemberStatus: &machine.EtcdMemberStatus{MemberId: n.memberID, Errors: errs}}}}, nil
}

func (n *fakeNode) EtcdAlarmList(context.Context, *emptypb.Empty) (*machine.EtcdAlarmListResponse, error) {
	return &machine.EtcdAlarmListResponse{Messages: []*machine.EtcdAlarm{{}}}, nil
}

// setStatus writes the node's MachineStatus resource (caller holds fc.mu).
func (n *fakeNode) setStatus(stage runtime.MachineStage, ready bool) {
	ms := runtime.NewMachineStatus()
	err := safe.StateModify(context.Background(), n.state, ms, func(r *runtime.MachineStatus) error {
		r.TypedSpec().Stage = stage
		r.TypedSpec().Status.Ready = ready
		r.TypedSpec().Status.UnmetConditions = nil
		if !ready {
			r.TypedSpec().Status.UnmetConditions = []runtime.UnmetCondition{{Name: "nodeReady", Reason: "node is not ready"}}
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
}

// fakeSpec scripts one node.
type fakeSpec struct {
	name, role, talos, k8s string
}

// declaredVersions are the versions the tests declare.
const (
	fromTalos = "v1.11.4"
	toTalos   = "v1.11.5"
	k8sVer    = "v1.34.1"
	installer = "ghcr.io/siderolabs/installer:" + toTalos
)

// newFake starts one TLS server per node and returns the cluster, its
// declaration (endpoints on loopback) and the talosconfig file.
func newFake(t *testing.T, specs ...fakeSpec) (*fakeCluster, Declared, string) {
	t.Helper()
	ca, caKey := newCA(t)
	serverCert := leaf(t, ca, caKey, false)
	clientCert := leaf(t, ca, caKey, true)
	pool := x509.NewCertPool()
	pool.AddCert(ca)

	fc := &fakeCluster{}
	d := Declared{TalosVersion: toTalos, KubernetesVersion: k8sVer, InstallImage: installer, KubernetesEndpoint: "https://10.0.0.10:6443"}
	for i, s := range specs {
		n := &fakeNode{fc: fc, name: s.name, role: vocab.Role(s.role), version: s.talos, readyAfter: true,
			state: state.WrapCore(namespaced.NewState(inmem.Build))}
		if n.role == vocab.RoleControlPlane {
			n.memberID = uint64(0x100 + i)
		}
		n.setStatus(runtime.MachineStageRunning, true)
		ctx := context.Background()
		kubelet := k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID)
		kubelet.TypedSpec().Image = "ghcr.io/siderolabs/kubelet:" + s.k8s
		require.NoError(t, n.state.Create(ctx, kubelet))
		if n.role == vocab.RoleControlPlane {
			api := k8s.NewAPIServerConfig()
			api.TypedSpec().Image = "registry.k8s.io/kube-apiserver:" + s.k8s
			require.NoError(t, n.state.Create(ctx, api))
		}
		fc.nodes = append(fc.nodes, n)

		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{serverCert},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
		})))
		n.srv = srv
		machine.RegisterMachineServiceServer(srv, n)
		v1alpha1.RegisterStateServer(srv, cosiserver.NewState(n.state))
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		d.Nodes = append(d.Nodes, Node{Name: s.name, Role: n.role, Endpoint: lis.Addr().String()})
	}

	talosconfig := filepath.Join(t.TempDir(), "talosconfig")
	cfg := clientconfig.NewConfig("test", []string{"127.0.0.1"}, pemCert(ca.Raw), &sidx509.PEMEncodedCertificateAndKey{
		Crt: pemCert(clientCert.Certificate[0]), Key: pemKey(t, clientCert.PrivateKey.(*ecdsa.PrivateKey)),
	})
	require.NoError(t, cfg.Save(talosconfig))
	return fc, d, talosconfig
}

// connect connects to the fake with test timeouts.
func connect(t *testing.T, d Declared, talosconfig string) *Cluster {
	t.Helper()
	cfg, err := clientconfig.Open(talosconfig)
	require.NoError(t, err)
	c, err := Connect(context.Background(), cfg, d)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testOptions are short waits for the fake.
func testOptions(out *strings.Builder) Options {
	return Options{Out: out, Poll: 5 * time.Millisecond, RebootTimeout: 2 * time.Second, HealthTimeout: 300 * time.Millisecond}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "talos-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return ca, key
}

func leaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, client bool) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "apid", Organization: []string{"os:admin"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}
