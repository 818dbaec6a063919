package vault

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/tests/vaultapi"
)

// serve starts f over TLS and returns a client that trusts the server's certificate.
func serve(t *testing.T, f *vaultapi.Vault) *Client {
	t.Helper()
	addr, ca := vaultapi.Serve(t, f)
	c, err := NewClient(addr, ca)
	require.NoError(t, err)
	return c
}

func TestSealStatus(t *testing.T) {
	c := serve(t, vaultapi.Sealed())
	s, err := c.SealStatus(context.Background())
	require.NoError(t, err)
	assert.True(t, s.Sealed)
	assert.Equal(t, 3, s.T)
	assert.Equal(t, 5, s.N)
	assert.Equal(t, "raft", s.StorageType)
	assert.Contains(t, s.String(), "sealed (0 of 3 shares entered)")
}

func TestUnsealStopsAtThreshold(t *testing.T) {
	f := vaultapi.Sealed()
	c := serve(t, f)
	s, err := c.UnsealWith(context.Background(), Shares(strings.NewReader("s2\n\n s4 \ns5\ns1\n")))
	require.NoError(t, err)
	assert.False(t, s.Sealed)
	assert.Equal(t, 3, f.UnsealCalls(), "exactly the threshold's shares are sent; the fourth stays unread")
}

func TestUnsealRunsOutOfShares(t *testing.T) {
	c := serve(t, vaultapi.Sealed())
	s, err := c.UnsealWith(context.Background(), Shares(strings.NewReader("s1\ns2\n")))
	require.ErrorIs(t, err, ErrStillSealed)
	assert.Contains(t, err.Error(), "2 of 3 shares entered")
	assert.True(t, s.Sealed)
}

// TestUnsealWaitsForAJoiningFollower: a raft follower that took the
// threshold's shares stays sealed, progress 0, until the leader's keyring
// reaches it; unseal waits for it (up to JoinWait) instead of asking for
// more shares and calling it "0 of 3 shares entered".
func TestUnsealWaitsForAJoiningFollower(t *testing.T) {
	f := vaultapi.Sealed()
	f.JoinAfter = 2 * time.Second
	s, err := serve(t, f).UnsealWith(context.Background(), Shares(strings.NewReader("s1\ns2\ns3\ns4\n")))
	require.NoError(t, err)
	assert.False(t, s.Sealed)
	assert.Equal(t, 3, f.UnsealCalls(), "no share past the threshold is asked for")

	defer func(w time.Duration) { JoinWait = w }(JoinWait)
	JoinWait = 1500 * time.Millisecond
	g := vaultapi.Sealed()
	g.JoinAfter = time.Hour
	s, err = serve(t, g).UnsealWith(context.Background(), Shares(strings.NewReader("s1\ns2\ns3\n")))
	require.ErrorIs(t, err, ErrStillSealed)
	assert.Contains(t, err.Error(), "raft follower unseals once its leader's keyring reaches it")
	assert.True(t, s.Sealed)
}

func TestUnsealRefusesUninitializedAndSkipsUnsealed(t *testing.T) {
	f := vaultapi.Sealed()
	f.Initialized = false
	_, err := serve(t, f).UnsealWith(context.Background(), Shares(strings.NewReader("s1\n")))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "vault operator init")
	assert.Contains(t, err.Error(), "a raft follower says this until its retry_join reaches an unsealed leader", "the double's storage is raft")
	assert.Zero(t, f.UnsealCalls())

	g := vaultapi.Sealed()
	g.Sealed = false
	s, err := serve(t, g).UnsealWith(context.Background(), func(SealStatus) (string, error) {
		return "", errors.New("no share may be asked of an unsealed vault")
	})
	require.NoError(t, err)
	assert.False(t, s.Sealed)
}

func TestUnsealReportsVaultErrors(t *testing.T) {
	c := serve(t, vaultapi.Sealed())
	_, err := c.Unseal(context.Background(), "wrong")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "400")
	assert.Contains(t, err.Error(), "invalid key")
}

func TestEnableFileAuditOnce(t *testing.T) {
	f := vaultapi.Sealed()
	c := serve(t, f)
	_, err := c.EnableFileAudit(context.Background(), "bad", "/vault/audit/vault_audit.log")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "permission denied")

	enabled, err := c.EnableFileAudit(context.Background(), "root", "/vault/audit/vault_audit.log")
	require.NoError(t, err)
	assert.True(t, enabled)
	require.Contains(t, f.Audit, "file/")
	enabled, err = c.EnableFileAudit(context.Background(), "root", "/vault/audit/vault_audit.log")
	require.NoError(t, err)
	assert.False(t, enabled, "a second run finds the device and enables none")
}

func TestClientRefusesPlainHTTPAndUntrustedServers(t *testing.T) {
	_, err := NewClient("http://127.0.0.1:8200", []byte("x"))
	require.Error(t, err)

	srv := httptest.NewTLSServer(vaultapi.Sealed())
	defer srv.Close()
	// Every httptest server shares one certificate: the untrusted CA is
	// a self-signed one of the test's own.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	c, err := NewClient(srv.URL, ca)
	require.NoError(t, err)
	_, err = c.SealStatus(context.Background())
	require.Error(t, err, "a server whose certificate the CA did not issue is refused")
}
