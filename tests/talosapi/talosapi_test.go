package talosapi_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	sidx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	mtype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/milner/milner/tests/talosapi"
	"github.com/milner/milner/tests/testpki"
)

const k8sVersion = "1.34.1"

// env is a cluster of doubles on loopback with its configs.
type env struct {
	t       *testing.T
	c       *talosapi.Cluster
	secrets *talosapi.Secrets
	cp, w   []byte
	tc      *clientconfig.Config
}

// ip is the i-th test address: 127.0.0.0/8 is all loopback, so each node
// has its own IP without root.
func ip(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(10 + i)}), 0)
}

// secrets is one bundle for every test: generating one takes seconds (an
// RSA key), and each test's doubles are a cluster of their own anyway.
var secrets = sync.OnceValues(func() (*talosapi.Secrets, error) { return talosapi.NewSecrets("test", "https://127.0.0.1:1") })

func newEnv(t *testing.T, opts ...talosapi.Option) *env {
	t.Helper()
	s, err := secrets()
	require.NoError(t, err)
	cp, err := s.Config(mtype.TypeControlPlane, k8sVersion)
	require.NoError(t, err)
	w, err := s.Config(mtype.TypeWorker, k8sVersion)
	require.NoError(t, err)
	tc, err := s.Talosconfig()
	require.NoError(t, err)
	c := talosapi.NewCluster(opts...)
	t.Cleanup(func() { _ = c.Close() })
	return &env{t: t, c: c, secrets: s, cp: cp, w: w, tc: tc}
}

func (e *env) add(name string, i int, opts ...talosapi.NodeOption) *talosapi.Node {
	e.t.Helper()
	n, err := e.c.AddNode(name, ip(i), opts...)
	require.NoError(e.t, err)
	return n
}

// configured adds a node booted with cfg, as nocloud hands it over.
func (e *env) configured(name string, i int, cfg []byte, opts ...talosapi.NodeOption) *talosapi.Node {
	e.t.Helper()
	return e.add(name, i, append(opts, talosapi.WithPlatformConfig(cfg))...)
}

// client is machinery's client with the talosconfig, at n.
func (e *env) client(n *talosapi.Node) *client.Client {
	e.t.Helper()
	cl, err := client.New(context.Background(), client.WithConfig(e.tc), client.WithEndpoints(n.Endpoint()))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// insecure is the client talosctl --insecure builds: TLS, no client
// certificate, the server's not verified.
func (e *env) insecure(n *talosapi.Node) *client.Client {
	e.t.Helper()
	cl, err := client.New(context.Background(), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), client.WithEndpoints(n.Endpoint()))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func patch(t *testing.T, cfg []byte, p string) []byte {
	t.Helper()
	patches, err := configpatcher.LoadPatches([]string{p})
	require.NoError(t, err)
	out, err := configpatcher.Apply(configpatcher.WithBytes(cfg), patches)
	require.NoError(t, err)
	b, err := out.Bytes()
	require.NoError(t, err)
	return b
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Maintenance mode up to v1.12 answers as internal/app/maintenance/server.go:
// Disks, ApplyConfiguration for AUTO/REBOOT/TRY only, a dry run without a
// mode, and the admin-only calls refused to every (insecure) caller.
func TestMaintenanceMode(t *testing.T) {
	e := newEnv(t)
	n := e.add("cp-1", 1, talosapi.WithVersion("v1.12.11"))
	cl := e.insecure(n)
	c := ctx(t)

	disks, err := cl.Disks(c)
	require.NoError(t, err)
	require.Len(t, disks.GetMessages()[0].GetDisks(), 1)
	assert.Equal(t, "/dev/vda", disks.GetMessages()[0].GetDisks()[0].GetDeviceName())

	_, err = cl.Version(c)
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.ErrorContains(t, err, "API is not implemented in maintenance mode")

	_, err = cl.ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: e.cp, Mode: machine.ApplyConfigurationRequest_STAGED})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.ErrorContains(t, err, "apply configuration --mode='staged' is not supported in maintenance mode")
	_, err = cl.ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: e.cp, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	assert.ErrorContains(t, err, "--mode='no-reboot' is not supported")

	dry, err := cl.ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: e.cp, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, machine.ApplyConfigurationRequest_REBOOT, dry.GetMessages()[0].GetMode(), "no mode set: 0 is REBOOT")
	assert.Contains(t, dry.GetMessages()[0].GetModeDetails(), "Node is running in maintenance mode and does not have a config yet.")

	_, err = cl.ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: []byte("{{"), Mode: machine.ApplyConfigurationRequest_AUTO})
	assert.Equal(t, codes.Unknown, status.Code(err), "a parse error is a plain error")
	assert.ErrorContains(t, err, "failed to parse config")

	invalid := patch(t, e.cp, "machine:\n  install:\n    diskSelector:\n      size: '>= 1PB'\n")
	_, err = cl.ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: invalid, Mode: machine.ApplyConfigurationRequest_AUTO})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.ErrorContains(t, err, "runtime configuration validation failed")

	assert.True(t, n.Status().Maintenance, "nothing was applied")
	j := e.c.Journal().Calls("ApplyConfiguration")
	require.Len(t, j, 5)
	assert.True(t, j[0].Client.Insecure)
	assert.Equal(t, []string{"os:reader"}, j[0].Roles)
	assert.True(t, j[2].DryRun())
	assert.Equal(t, machine.ApplyConfigurationRequest_REBOOT, j[2].Resolved())
}

// From v1.13 maintenance mode is machined's own API (b7d70cf6 "unify
// maintenance and regular APIs"; v1alpha1_server.go ApplyConfiguration):
// an os:reader may ask Version and apply a config; AUTO and REBOOT boot it
// without a reboot, STAGED only keeps it for a next boot.
func TestMaintenanceModeFromV113(t *testing.T) {
	e := newEnv(t)
	n := e.add("cp-1", 1)
	cl := e.insecure(n)
	c := ctx(t)

	v, err := cl.Version(c)
	require.NoError(t, err)
	assert.Equal(t, talosapi.DefaultVersion, v.GetMessages()[0].GetVersion().GetTag())

	dry, err := cl.ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: e.cp, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, machine.ApplyConfigurationRequest_NO_REBOOT, dry.GetMessages()[0].GetMode())

	_, err = cl.ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: e.cp, Mode: machine.ApplyConfigurationRequest_STAGED})
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	assert.True(t, n.Status().Maintenance, "a staged config is not booted")
	assert.True(t, n.Status().Pending, "a staged config is kept for the next boot")

	_, err = cl.ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: e.cp, Mode: machine.ApplyConfigurationRequest_REBOOT})
	require.NoError(t, err)
	waitFor(t, "configured", func() bool { s := n.Status(); return s.On && !s.Maintenance })
	assert.Empty(t, e.c.Journal().Calls("Reboot"), "nothing asked the node to reboot")
}

// The first config applied in maintenance mode switches the node to
// apid's mutual TLS against the config's machine CA.
func TestFirstApplyConfiguresTheNode(t *testing.T) {
	e := newEnv(t)
	n := e.add("cp-1", 1)
	c := ctx(t)
	_, err := e.insecure(n).ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: e.cp, Mode: machine.ApplyConfigurationRequest_AUTO})
	require.NoError(t, err)
	waitFor(t, "configured", func() bool { s := n.Status(); return s.On && !s.Maintenance })

	v, err := e.client(n).Version(c)
	require.NoError(t, err)
	assert.Equal(t, talosapi.DefaultVersion, v.GetMessages()[0].GetVersion().GetTag())
	assert.True(t, v.GetMessages()[0].GetFeatures().GetRbac())

	_, err = e.insecure(n).Disks(c)
	assert.Error(t, err, "TLS without a client certificate is refused")

	other := testpki.NewCA(time.Now().Add(-time.Hour), time.Now().Add(time.Hour)).Client("admin", "os:admin")
	tc, err := e.secrets.Talosconfig()
	require.NoError(t, err)
	tc.Contexts[tc.Context].Crt = b64(other.Cert)
	tc.Contexts[tc.Context].Key = b64(other.Key)
	stranger, err := client.New(c, client.WithConfig(tc), client.WithEndpoints(n.Endpoint()))
	require.NoError(t, err)
	defer func() { _ = stranger.Close() }()
	_, err = stranger.Version(c)
	assert.Error(t, err, "a client certificate from another CA is refused")

	// The server certificate is the machine CA's, for the node's IP.
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(e.secrets.Bundle().Certs.OS.Crt))
	conn, err := tls.Dial("tcp", n.Endpoint(), &tls.Config{RootCAs: pool, ServerName: n.IP().String(), NextProtos: []string{"h2"}})
	if err == nil {
		_ = conn.Close()
	}
	require.NoError(t, err)

	boots := n.Journal().Events("boot")
	require.Len(t, boots, 2)
	assert.Equal(t, []string{"maintenance", "configured"}, []string{boots[0].Detail, boots[1].Detail})
	assert.Empty(t, e.c.Journal().Events("reboot"))
}

func b64(pemText string) string { return base64.StdEncoding.EncodeToString([]byte(pemText)) }

// tcWithOrg is the talosconfig with a client certificate from the
// cluster's OS CA in the organizations orgs (Talos' roles).
func (e *env) tcWithOrg(t *testing.T, orgs ...string) *clientconfig.Config {
	t.Helper()
	ca, err := sidx509.NewCertificateAuthorityFromCertificateAndKey(e.secrets.Bundle().Certs.OS)
	require.NoError(t, err)
	kp, err := sidx509.NewKeyPair(ca, sidx509.CommonName("someone"), sidx509.Organization(orgs...),
		sidx509.NotAfter(time.Now().Add(time.Hour)), sidx509.KeyUsage(x509.KeyUsageDigitalSignature),
		sidx509.ExtKeyUsage([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}))
	require.NoError(t, err)
	tc, err := e.secrets.Talosconfig()
	require.NoError(t, err)
	tc.Contexts[tc.Context].Crt = base64.StdEncoding.EncodeToString(kp.CrtPEM)
	tc.Contexts[tc.Context].Key = base64.StdEncoding.EncodeToString(kp.KeyPEM)
	return tc
}

// ApplyConfiguration in configured mode resolves its mode as machined:
// a change of a live part applies without a reboot, anything else needs
// one; STAGED writes the config for the next boot and reboots nothing.
func TestApplyModesAsMachinedResolvesThem(t *testing.T) {
	e := newEnv(t)
	n := e.configured("cp-1", 1, e.cp)
	cl := e.client(n)
	c := ctx(t)
	apply := func(cfg []byte, mode machine.ApplyConfigurationRequest_Mode, dry bool) (*machine.ApplyConfiguration, error) {
		r, err := cl.ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: cfg, Mode: mode, DryRun: dry})
		if err != nil {
			return nil, err
		}
		return r.GetMessages()[0], nil
	}
	live := patch(t, e.cp, "machine:\n  nodeLabels:\n    milner.dev/x: y\n")
	reboot := patch(t, e.cp, "machine:\n  env:\n    FOO: bar\n")

	r, err := apply(e.cp, machine.ApplyConfigurationRequest_AUTO, true)
	require.NoError(t, err)
	assert.Equal(t, machine.ApplyConfigurationRequest_NO_REBOOT, r.GetMode())
	assert.Contains(t, r.GetModeDetails(), "No changes.")

	r, err = apply(live, machine.ApplyConfigurationRequest_AUTO, true)
	require.NoError(t, err)
	assert.Equal(t, machine.ApplyConfigurationRequest_NO_REBOOT, r.GetMode(), ".machine.nodeLabels applies live")

	r, err = apply(reboot, machine.ApplyConfigurationRequest_AUTO, true)
	require.NoError(t, err)
	assert.Equal(t, machine.ApplyConfigurationRequest_REBOOT, r.GetMode(), ".machine.env needs a reboot")
	assert.Contains(t, r.GetModeDetails(), "Applied configuration with a reboot (skipped in dry-run)")

	_, err = apply(reboot, machine.ApplyConfigurationRequest_NO_REBOOT, false)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.ErrorContains(t, err, "this config change can't be applied in immediate mode")

	r, err = apply(live, machine.ApplyConfigurationRequest_AUTO, false)
	require.NoError(t, err)
	assert.Equal(t, machine.ApplyConfigurationRequest_NO_REBOOT, r.GetMode())
	assert.Equal(t, live, n.Config(), "applied live")

	r, err = apply(reboot, machine.ApplyConfigurationRequest_STAGED, false)
	require.NoError(t, err)
	assert.Equal(t, machine.ApplyConfigurationRequest_STAGED, r.GetMode())
	assert.True(t, n.Status().Pending)
	assert.Equal(t, live, n.Config(), "a staged config does not run")
	assert.Equal(t, reboot, n.PersistedConfig())
	// A dry run compares with the running config, not the staged one.
	r, err = apply(reboot, machine.ApplyConfigurationRequest_AUTO, true)
	require.NoError(t, err)
	assert.Equal(t, machine.ApplyConfigurationRequest_REBOOT, r.GetMode())
	assert.Empty(t, e.c.Journal().Events("reboot"), "nothing rebooted by itself")

	bootID := n.Status().BootID
	err = cl.Reboot(c)
	require.NoError(t, err)
	waitFor(t, "reboot", func() bool { s := n.Status(); return s.On && s.BootID != bootID })
	assert.False(t, n.Status().Pending)
	assert.Equal(t, reboot, n.Config(), "the staged config runs after the reboot")
	reboots := e.c.Journal().Events("reboot")
	require.Len(t, reboots, 1)
	assert.Equal(t, "Reboot", reboots[0].Detail)

	modes := []string{}
	for _, a := range e.c.Journal().Applies().Succeeded() {
		modes = append(modes, a.Mode().String()+"->"+a.Resolved().String())
	}
	assert.Equal(t, []string{"AUTO->NO_REBOOT", "STAGED->STAGED"}, modes)
}

// AUTO resolved to REBOOT reboots the node into the new config.
func TestAutoNeedingARebootReboots(t *testing.T) {
	e := newEnv(t)
	n := e.configured("cp-1", 1, e.cp)
	reboot := patch(t, e.cp, "machine:\n  env:\n    FOO: bar\n")
	_, err := e.client(n).ApplyConfiguration(ctx(t), &machine.ApplyConfigurationRequest{Data: reboot, Mode: machine.ApplyConfigurationRequest_AUTO})
	require.NoError(t, err)
	waitFor(t, "reboot", func() bool { return len(e.c.Journal().Events("reboot")) == 1 && n.Status().On })
	assert.Equal(t, "ApplyConfiguration", e.c.Journal().Events("reboot")[0].Detail)
	waitFor(t, "new config", func() bool { return bytes.Equal(n.Config(), reboot) })
}

// Bootstrap waits up to 5 s for the node's time to be in sync, then
// answers FailedPrecondition "time is not in sync yet" (the provider
// retries it); once in sync it bootstraps.
func TestBootstrapWaitsForTimeSync(t *testing.T) {
	e := newEnv(t, talosapi.WithTimeSync(7*time.Second))
	cp1 := e.configured("cp-1", 1, e.cp)
	c := ctx(t)
	start := time.Now()
	err := e.client(cp1).Bootstrap(c, &machine.BootstrapRequest{})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.ErrorContains(t, err, "time is not in sync yet")
	assert.GreaterOrEqual(t, time.Since(start), 4*time.Second, "Bootstrap waits for the sync before it answers")
	require.NoError(t, e.client(cp1).Bootstrap(c, &machine.BootstrapRequest{}), "in sync 7 s after boot")
	assert.Len(t, e.c.Journal().Calls("Bootstrap").Succeeded(), 1)
}

// Bootstrap as machined: not before the boot got far enough, not on a
// worker, once, then AlreadyExists; the other control planes join etcd.
func TestBootstrapOnceThenAlreadyExists(t *testing.T) {
	e := newEnv(t)
	cp1 := e.configured("cp-1", 1, e.cp, talosapi.WithManualReady())
	cp2 := e.configured("cp-2", 2, e.cp)
	w1 := e.configured("w-1", 3, e.w)
	c := ctx(t)
	cl := e.client(cp1)

	err := cl.Bootstrap(c, &machine.BootstrapRequest{})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.ErrorContains(t, err, "bootstrap is not available yet")
	_, err = cl.EtcdMemberList(c, &machine.EtcdMemberListRequest{})
	assert.ErrorContains(t, err, "no controlplane endpoints discovered yet")

	cp1.MarkReady()
	require.NoError(t, cl.Bootstrap(c, &machine.BootstrapRequest{}))
	err = cl.Bootstrap(c, &machine.BootstrapRequest{})
	assert.Equal(t, codes.AlreadyExists, status.Code(err))
	err = e.client(cp2).Bootstrap(c, &machine.BootstrapRequest{})
	assert.Equal(t, codes.AlreadyExists, status.Code(err), "cp-2 joined: its data directory is not empty")
	err = e.client(w1).Bootstrap(c, &machine.BootstrapRequest{})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.ErrorContains(t, err, "bootstrap can only be performed on a control plane node")

	members, err := e.client(cp2).EtcdMemberList(c, &machine.EtcdMemberListRequest{})
	require.NoError(t, err)
	var names []string
	for _, m := range members.GetMessages()[0].GetMembers() {
		names = append(names, m.GetHostname())
	}
	assert.ElementsMatch(t, []string{"cp-1", "cp-2"}, names)
	_, err = e.client(w1).EtcdMemberList(c, &machine.EtcdMemberListRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.ErrorContains(t, err, "member list is only available on control plane nodes")

	assert.Len(t, e.c.Journal().Calls("Bootstrap").Succeeded(), 1)
	ms, err := safe.StateGetByID[*runtime.MachineStatus](c, e.client(cp2).COSI, runtime.MachineStatusID)
	require.NoError(t, err)
	assert.True(t, ms.TypedSpec().Status.Ready, "%v", ms.TypedSpec().Status.UnmetConditions)
}

// Kubeconfig is machined's tar.gz of one file "kubeconfig": context
// admin@<cluster> current, the cluster endpoint, the cluster CA, a client
// certificate from it with the test's lifetime.
func TestKubeconfig(t *testing.T) {
	e := newEnv(t, talosapi.WithKubeconfigTTL(100*time.Hour))
	n := e.configured("cp-1", 1, e.cp)
	w := e.configured("w-1", 2, e.w)
	c := ctx(t)

	stream, err := e.client(n).MachineClient.Kubeconfig(c, nil)
	require.NoError(t, err)
	r, err := client.ReadStream(stream)
	require.NoError(t, err)
	raw, err := io.ReadAll(r)
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err)
	h, err := tar.NewReader(zr).Next()
	require.NoError(t, err)
	assert.Equal(t, "kubeconfig", h.Name)

	kc, err := e.client(n).Kubeconfig(c)
	require.NoError(t, err)
	cfg, err := clientcmd.Load(kc)
	require.NoError(t, err)
	assert.Equal(t, "admin@test", cfg.CurrentContext)
	cluster := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	assert.Equal(t, "https://127.0.0.1:1", cluster.Server)
	assert.Equal(t, e.secrets.Bundle().Certs.K8s.Crt, cluster.CertificateAuthorityData)
	block, _ := pem.Decode(cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].ClientCertificateData)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(100*time.Hour), cert.NotAfter, time.Minute)
	assert.Equal(t, []string{"system:masters"}, cert.Subject.Organization)

	_, err = e.client(w).Kubeconfig(c)
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.ErrorContains(t, err, "kubeconfig is only available on control plane nodes")
}

// One call to many nodes fans out as apid does: one message per node with
// its target as Metadata.Hostname, an unreachable node as an error; one
// call to another node is proxied and answered unchanged.
func TestFanOutAsApid(t *testing.T) {
	e := newEnv(t)
	cp1 := e.configured("cp-1", 1, e.cp)
	cp2 := e.configured("cp-2", 2, e.cp)
	w1 := e.configured("w-1", 3, e.w)
	c := ctx(t)
	cl := e.client(cp1)
	require.NoError(t, w1.SetReachable(false))

	all := client.WithNodes(c, cp1.IP().String(), cp2.IP().String(), w1.IP().String())
	resp, err := cl.MachineClient.Version(all, nil)
	require.NoError(t, err, "apid answers with per-node errors, not an error")
	require.Len(t, resp.GetMessages(), 3)
	got := map[string]string{}
	for _, m := range resp.GetMessages() {
		got[m.GetMetadata().GetHostname()] = m.GetVersion().GetTag() + m.GetMetadata().GetError()
	}
	assert.Equal(t, talosapi.DefaultVersion, got[cp1.IP().String()])
	assert.Equal(t, talosapi.DefaultVersion, got[cp2.IP().String()])
	assert.Contains(t, got[w1.IP().String()], "connection refused")
	_, err = cl.Version(all)
	assert.ErrorContains(t, err, w1.IP().String(), "machinery's client turns the error message into an error")

	one, err := cl.MachineClient.Version(client.WithNode(c, cp2.IP().String()), nil)
	require.NoError(t, err)
	require.Len(t, one.GetMessages(), 1)
	assert.Nil(t, one.GetMessages()[0].GetMetadata(), "one-to-one proxying adds no metadata")

	_, err = safe.StateGetByID[*runtime.MachineStatus](client.WithNodes(c, cp2.IP().String()), cl.COSI, runtime.MachineStatusID)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = safe.StateGetByID[*runtime.MachineStatus](client.WithNode(c, cp2.IP().String()), cl.COSI, runtime.MachineStatusID)
	require.NoError(t, err)

	j := e.c.Journal().Calls("Version")
	on2 := j.On("cp-2")
	require.Len(t, on2, 3, "two fan-outs and one proxied call")
	for _, e := range on2 {
		assert.Equal(t, "cp-1", e.Via)
		assert.Equal(t, []string{"os:admin"}, e.Client.Organizations)
	}
	assert.Empty(t, j.On("w-1"), "an unreachable node takes no call")
}

// Roles come from the client certificate; machined authorizes by them.
func TestRolesFromTheClientCertificate(t *testing.T) {
	e := newEnv(t)
	n := e.configured("cp-1", 1, e.cp)
	c := ctx(t)
	reader := e.tcWithOrg(t, "os:reader")
	cl, err := client.New(c, client.WithConfig(reader), client.WithEndpoints(n.Endpoint()))
	require.NoError(t, err)
	defer func() { _ = cl.Close() }()
	_, err = cl.Version(c)
	require.NoError(t, err)
	_, err = cl.ApplyConfiguration(c, &machine.ApplyConfigurationRequest{Data: e.cp, Mode: machine.ApplyConfigurationRequest_AUTO})
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	j := e.c.Journal().Calls("ApplyConfiguration")
	require.Len(t, j, 1)
	assert.Equal(t, []string{"os:reader"}, j[0].Roles)
	assert.Equal(t, codes.PermissionDenied, status.Code(j[0].Err))
}

// Shutdown answers, powers the node off and calls the hook.
func TestShutdownCallsTheHook(t *testing.T) {
	var stopped atomic.Value
	e := newEnv(t, talosapi.OnShutdown(func(n *talosapi.Node) { stopped.Store(n.Name()) }))
	n := e.configured("cp-1", 1, e.cp)
	err := e.client(n).Shutdown(ctx(t))
	require.NoError(t, err)
	waitFor(t, "the hook", func() bool { return stopped.Load() == "cp-1" })
	assert.False(t, n.Status().On)
	require.Len(t, n.Journal().Events("shutdown"), 1)
}

func TestAddressesAreUnique(t *testing.T) {
	e := newEnv(t)
	e.add("cp-1", 1)
	_, err := e.c.AddNode("cp-2", ip(1))
	assert.ErrorContains(t, err, "already taken")
}

func ExampleCluster() {
	c := talosapi.NewCluster()
	defer func() { _ = c.Close() }()
	n, err := c.AddNode("cp-1", netip.MustParseAddrPort("127.0.0.30:0"))
	if err != nil {
		panic(err)
	}
	fmt.Println(n.Status().Maintenance)
	// Output: true
}

// What `talosctl upgrade-k8s` reads, watches and calls (talos
// pkg/cluster/kubernetes): the running config as config.MachineConfig, a
// control plane component's config resource whose version moves with its
// image and flags, the static pod annotated with that version, the
// kubelet's Service going down and up again when its image changes, and
// ImagePull.
func TestWhatUpgradeK8sReads(t *testing.T) {
	e := newEnv(t)
	n := e.configured("cp-1", 1, e.cp)
	c := e.client(n)
	cx := ctx(t)
	mc, err := safe.StateGetByID[*config.MachineConfig](cx, c.COSI, config.ActiveID)
	require.NoError(t, err)
	assert.Equal(t, "registry.k8s.io/kube-apiserver:v"+k8sVersion, mc.Provider().Cluster().APIServer().Image())

	api, err := safe.StateGetByID[*k8s.APIServerConfig](cx, c.COSI, k8s.APIServerConfigID)
	require.NoError(t, err)
	assert.Equal(t, "registry.k8s.io/kube-apiserver:v"+k8sVersion, api.TypedSpec().Image)
	version := api.Metadata().Version().String()
	pod := n.StaticPods()["kube-apiserver"]
	require.NotNil(t, pod)
	assert.Equal(t, version, pod["metadata"].(map[string]any)["annotations"].(map[string]any)[constants.AnnotationStaticPodConfigVersion])

	services := make(chan safe.WrappedStateEvent[*v1alpha1.Service], 16)
	require.NoError(t, safe.StateWatch(cx, c.COSI, v1alpha1.NewService("kubelet").Metadata(), services))
	ev := <-services
	require.Equal(t, state.Created, ev.Type())
	svc, err := ev.Resource()
	require.NoError(t, err)
	assert.True(t, svc.TypedSpec().Running && svc.TypedSpec().Healthy)

	// A live patch of the API server's image and the kubelet's, as
	// upgrade-k8s applies it.
	next := patch(t, e.cp, `{"cluster":{"apiServer":{"image":"registry.k8s.io/kube-apiserver:v1.34.2"}},"machine":{"kubelet":{"image":"ghcr.io/siderolabs/kubelet:v1.34.2"}}}`)
	_, err = c.ApplyConfiguration(cx, &machine.ApplyConfigurationRequest{Data: next, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	require.NoError(t, err)
	mc, err = safe.StateGetByID[*config.MachineConfig](cx, c.COSI, config.ActiveID)
	require.NoError(t, err)
	assert.Equal(t, "ghcr.io/siderolabs/kubelet:v1.34.2", mc.Provider().Machine().Kubelet().Image())
	api, err = safe.StateGetByID[*k8s.APIServerConfig](cx, c.COSI, k8s.APIServerConfigID)
	require.NoError(t, err)
	assert.NotEqual(t, version, api.Metadata().Version().String(), "the API server's config resource kept its version")
	assert.Equal(t, api.Metadata().Version().String(), n.StaticPods()["kube-apiserver"]["metadata"].(map[string]any)["annotations"].(map[string]any)[constants.AnnotationStaticPodConfigVersion])
	var types []state.EventType
	for range 2 {
		ev := <-services
		types = append(types, ev.Type())
	}
	assert.Equal(t, []state.EventType{state.Destroyed, state.Created}, types, "the kubelet service did not restart")
	cm, err := safe.StateGetByID[*k8s.ControllerManagerConfig](cx, c.COSI, k8s.ControllerManagerConfigID)
	require.NoError(t, err)
	assert.Equal(t, "registry.k8s.io/kube-controller-manager:v"+k8sVersion, cm.TypedSpec().Image)

	// MachineService.ImagePull, deprecated upstream for ImageService, is what
	// nodes below v1.13 serve.
	pull := c.ImagePull //nolint:staticcheck // see above
	require.NoError(t, pull(cx, common.ContainerdNamespace_NS_CRI, "registry.k8s.io/kube-apiserver:v1.34.2"))
	err = pull(cx, common.ContainerdNamespace_NS_UNKNOWN, "registry.k8s.io/kube-apiserver:v1.34.2")
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

// A control plane joining the running cluster is a learner until Talos'
// etcd service promotes it, and etcd lets one learner in at a time: the
// next control plane joins once the first is promoted.
func TestJoinAsALearnerOneAtATime(t *testing.T) {
	e := newEnv(t, talosapi.WithLearnerPromotion(300*time.Millisecond))
	cp1 := e.configured("cp-1", 1, e.cp)
	require.NoError(t, cp1.BootstrapEtcd())
	e.configured("cp-2", 2, e.cp)
	e.configured("cp-3", 3, e.cp)
	assert.Equal(t, []string{"cp-2"}, e.c.EtcdLearners(), "cp-2 joins as a learner, cp-3 waits")
	_, joined := e.c.EtcdMembers()["cp-3"]
	assert.False(t, joined, "cp-3 joined beside a learner")
	members, err := e.client(cp1).EtcdMemberList(ctx(t), &machine.EtcdMemberListRequest{})
	require.NoError(t, err)
	learners := 0
	for _, m := range members.GetMessages()[0].GetMembers() {
		if m.GetIsLearner() {
			learners++
			assert.Equal(t, "cp-2", m.GetHostname())
		}
	}
	assert.Equal(t, 1, learners, "EtcdMemberList shows the learner")
	waitFor(t, "cp-3 to join after cp-2's promotion", func() bool { _, ok := e.c.EtcdMembers()["cp-3"]; return ok })
	waitFor(t, "every member promoted", func() bool { return len(e.c.EtcdLearners()) == 0 })
}
