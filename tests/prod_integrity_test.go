package tests

// Prod integrity: the image download carries its digest to PVE, the
// identity guard compares VM ids and hosts with the state, and the SSH
// pre-flight refuses a host missing from known_hosts; the last two against
// the PVE API double (tests/pveapi) holding the converged cluster. Helpers
// are prefixed "pxi".

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/pve"
	"github.com/milner/milner/tests/pveapi"
)

// pxiDigest is a well-formed SHA-256 digest.
const pxiDigest = "5d41402abc4b2a76b9719d911017c592aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// TestProdImageChecksum: with imageSha256 every host's download carries it
// as checksum (sha256) for PVE to verify, and an existing download ignores
// it rather than be replaced (bpg: RequiresReplace); without it, none.
func TestProdImageChecksum(t *testing.T) {
	pinned := pxcEditProxmox(t, stackConfig(t, "prod", prodSecrets), func(px map[string]any) { px["imageSha256"] = pxiDigest })
	images := runStack(t, "prod", pinned).ByType(prodTImage)
	require.Len(t, images, 3)
	for _, img := range images {
		assert.Equal(t, pxiDigest, img.Inputs["checksum"].StringValue(), img.Name)
		assert.Equal(t, "sha256", img.Inputs["checksumAlgorithm"].StringValue(), img.Name)
		assert.Subset(t, img.Options.IgnoreChanges, []string{"checksum", "checksumAlgorithm"}, img.Name)
	}
	for _, img := range runStack(t, "prod", stackConfig(t, "prod", prodSecrets)).ByType(prodTImage) {
		assert.False(t, img.Inputs.HasValue("checksum"), "%s: no digest configured, none passed", img.Name)
	}
}

// pxiConverged is the cluster as Milner leaves it: node VMs 150-152 named
// milner-prod-cp-N, running, and their stopped holders 1150-1152, one node
// per host.
func pxiConverged(s *pveapi.Server) {
	for i, host := range []string{"pve-1", "pve-2", "pve-3"} {
		name := fmt.Sprintf("milner-prod-cp-%d", i+1)
		s.AddVM(pveapi.VM{VMID: 150 + i, Node: host, Status: "running", Config: map[string]string{"name": name}})
		s.AddVM(pveapi.VM{VMID: 1150 + i, Node: host, Status: "stopped", Config: map[string]string{"name": name + "-disks", "protection": "1"}})
	}
}

// pxiClient is a client of the double holding the converged cluster.
func pxiClient(t *testing.T) *pve.Client {
	_, srv := pxcDouble(t, pxcFullACL, pxiConverged)
	return pxcClient(t, srv)
}

// TestProdStaleVMIsRefused: the committed prod stack's VMs against the
// converged cluster. A state that agrees passes; a state restored from
// before cp-1's vmId change (it records VM 140) and before cp-2's move
// from pve-1 is refused before any change, naming both VMs.
func TestProdStaleVMIsRefused(t *testing.T) {
	ctx := context.Background()
	c := pxiClient(t)
	declared := prodDeclared(t)
	live, err := guard.ListProxmox(ctx, c)
	require.NoError(t, err)
	state := guard.State{}
	for _, d := range declared {
		state[guard.Ref{Type: d.Type, Logical: d.Logical}] = guard.Object{ID: strconv.Itoa(d.VMID), Host: d.Host}
	}
	assert.Empty(t, guard.Stale("prod", declared, state, live), "state and cluster agree")

	state[guard.Ref{Type: prodTVM, Logical: "milner-prod-cp-1"}] = guard.Object{ID: "140", Host: "pve-1"}
	state[guard.Ref{Type: prodTVM, Logical: "milner-prod-cp-2"}] = guard.Object{ID: "151", Host: "pve-1"}
	f := guard.Stale("prod", declared, state, live)
	require.Len(t, f, 2)
	assert.Contains(t, f[0].Problem, `records Proxmox VM "milner-prod-cp-1" (milner-prod-cp-1) as VM 140 on pve-1, but the cluster's "milner-prod-cp-1" is VM 150 on pve-1`)
	assert.Contains(t, f[1].Problem, `"milner-prod-cp-2" is VM 151 on pve-2`)
	assert.Contains(t, f[1].Fix, "milner state restore --stack prod --backup latest")
}

// TestProdUnknownHostsAreRefused: the SSH address of each host comes from
// its network (as bpg's resolver finds it); known_hosts that knows pve-1
// (plain) and pve-2 (hashed, as Debian's ssh writes it) but not pve-3 is
// one finding naming pve-3's address and the commands to check and add
// it; a missing known_hosts knows no host; a full one passes.
func TestProdUnknownHostsAreRefused(t *testing.T) {
	ctx := context.Background()
	c := pxiClient(t)
	hosts := map[string]string{}
	for _, h := range []string{"pve-1", "pve-2", "pve-3"} {
		addr, err := c.SSHAddress(ctx, h)
		require.NoError(t, err)
		hosts[h] = addr
	}
	assert.Equal(t, map[string]string{"pve-1": "127.0.0.11", "pve-2": "127.0.0.12", "pve-3": "127.0.0.13"}, hosts)

	pub, _, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	key, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "known_hosts")
	lines := knownhosts.Line([]string{"127.0.0.11"}, key) + "\n" +
		knownhosts.Line([]string{knownhosts.HashHostname("127.0.0.12")}, key) + "\n"
	require.NoError(t, os.WriteFile(path, []byte(lines), 0o600))

	f, err := guard.KnownHosts(ctx, path, hosts, nil)
	require.NoError(t, err)
	require.Len(t, f, 1)
	assert.Contains(t, f[0].Problem, `Proxmox host "pve-3" (127.0.0.13`)
	assert.Contains(t, f[0].Problem, "milner:substrate.proxmox.ssh")
	assert.Contains(t, f[0].Fix, "ssh-keyscan -t ed25519 127.0.0.13 >> "+path)
	assert.Contains(t, f[0].Fix, "ssh-keygen -F 127.0.0.13")

	missing, err := guard.KnownHosts(ctx, filepath.Join(t.TempDir(), "none"), hosts, nil)
	require.NoError(t, err)
	assert.Len(t, missing, 3, "a missing known_hosts knows no host")

	require.NoError(t, os.WriteFile(path, []byte(lines+knownhosts.Line([]string{"127.0.0.13"}, key)+"\n"), 0o600))
	f, err = guard.KnownHosts(ctx, path, hosts, nil)
	require.NoError(t, err)
	assert.Empty(t, f, "every host known")
	assert.False(t, strings.Contains(lines, "127.0.0.12"), "pve-2's entry is hashed (sanity)")
}

// TestProdChangedHostKeyIsRefused: a host known_hosts knows whose SSH
// server now shows another key is a finding naming the new key's
// fingerprint and the commands to check and replace the entry, before
// anything is touched (bpg refuses such a host only when it uploads a
// snippet, mid-apply); the known key, or a host that cannot be reached,
// is none. DialHostKey reads the key the PVE double's sshd shows, asking
// for the known key's type, without authenticating.
func TestProdChangedHostKeyIsRefused(t *testing.T) {
	ctx := context.Background()
	s := pveapi.New(pveapi.Host{Name: "pve-1", Address: "127.0.0.11", Gateway: "127.0.0.1"})
	newSigner := func() ssh.Signer {
		_, k, err := ed25519.GenerateKey(nil)
		require.NoError(t, err)
		sg, err := ssh.NewSignerFromKey(k)
		require.NoError(t, err)
		return sg
	}
	old, other := newSigner(), newSigner()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := s.ServeSSH(l, "pve-1", old, "root")
	t.Cleanup(func() { _ = h.Close() })
	// KnownHosts dials <address>:22; the double listens elsewhere.
	dial := func(ctx context.Context, _ string, algos []string) (ssh.PublicKey, error) {
		return guard.DialHostKey(ctx, l.Addr().String(), algos)
	}
	path := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(path, []byte(knownhosts.Line([]string{"127.0.0.11"}, old.PublicKey())+"\n"), 0o600))
	hosts := map[string]string{"pve-1": "127.0.0.11"}

	f, err := guard.KnownHosts(ctx, path, hosts, dial)
	require.NoError(t, err)
	assert.Empty(t, f, "the known key")

	h.SetHostKey(other)
	f, err = guard.KnownHosts(ctx, path, hosts, dial)
	require.NoError(t, err)
	require.Len(t, f, 1)
	assert.Contains(t, f[0].Problem, `Proxmox host "pve-1" (127.0.0.11) shows another SSH host key (`+ssh.FingerprintSHA256(other.PublicKey())+")")
	assert.Contains(t, f[0].Fix, "ssh-keygen -R 127.0.0.11 -f "+path)

	unreachable := func(context.Context, string, []string) (ssh.PublicKey, error) {
		return nil, errors.New("connection refused")
	}
	f, err = guard.KnownHosts(ctx, path, hosts, unreachable)
	require.NoError(t, err)
	assert.Empty(t, f, "a host that cannot be reached is the provider's to report")
}
