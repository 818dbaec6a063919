package vault

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeVault answers the documented endpoints the way Vault does
// (developer.hashicorp.com/vault/api-docs/system/seal-status, .../unseal,
// .../audit): seal-status is unauthenticated; each unseal share raises
// progress until the threshold t, then Vault unseals and progress is 0; a
// reset discards the shares; errors are {"errors": [...]}; sys/audit needs
// X-Vault-Token.
type fakeVault struct {
	mu          sync.Mutex
	initialized bool
	sealed      bool
	shares      []string
	t           int
	entered     []string
	token       string
	audit       map[string]any
	unsealCalls int
}

func (f *fakeVault) status() map[string]any {
	return map[string]any{
		"type": "shamir", "initialized": f.initialized, "sealed": f.sealed,
		"t": f.t, "n": len(f.shares), "progress": len(f.entered), "nonce": "",
		"version": "1.19.0", "storage_type": "raft",
	}
}

func (f *fakeVault) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(code int, msg string) { reply(code, map[string]any{"errors": []string{msg}}) }
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/sys/seal-status":
		reply(200, f.status())
	case (r.Method == http.MethodPost || r.Method == http.MethodPut) && r.URL.Path == "/v1/sys/unseal":
		f.unsealCalls++
		var body struct {
			Key   string `json:"key"`
			Reset bool   `json:"reset"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			fail(400, err.Error())
			return
		}
		if body.Reset {
			f.entered = nil
			reply(200, f.status())
			return
		}
		if body.Key == "" {
			fail(400, "'key' must be specified in request body as JSON, or 'reset' set to true")
			return
		}
		valid := false
		for _, s := range f.shares {
			valid = valid || s == body.Key
		}
		if !valid {
			f.entered = nil
			fail(400, "invalid key")
			return
		}
		f.entered = append(f.entered, body.Key)
		if len(f.entered) >= f.t {
			f.sealed, f.entered = false, nil
		}
		reply(200, f.status())
	case r.URL.Path == "/v1/sys/audit" || strings.HasPrefix(r.URL.Path, "/v1/sys/audit/"):
		if r.Header.Get("X-Vault-Token") != f.token {
			fail(403, "permission denied")
			return
		}
		if r.Method == http.MethodGet {
			out := map[string]any{"request_id": "x", "data": f.audit}
			for k, v := range f.audit {
				out[k] = v
			}
			reply(200, out)
			return
		}
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.audit[strings.TrimPrefix(r.URL.Path, "/v1/sys/audit/")+"/"] = body
		w.WriteHeader(204)
	default:
		fail(404, "unsupported path")
	}
}

// serve starts f over TLS and returns a client that trusts the server's certificate.
func serve(t *testing.T, f *fakeVault) *Client {
	t.Helper()
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := NewClient(srv.URL, ca)
	require.NoError(t, err)
	return c
}

func sealedVault() *fakeVault {
	return &fakeVault{initialized: true, sealed: true, shares: []string{"s1", "s2", "s3", "s4", "s5"}, t: 3, token: "root", audit: map[string]any{}}
}

func TestSealStatus(t *testing.T) {
	c := serve(t, sealedVault())
	s, err := c.SealStatus(context.Background())
	require.NoError(t, err)
	assert.True(t, s.Sealed)
	assert.Equal(t, 3, s.T)
	assert.Equal(t, 5, s.N)
	assert.Equal(t, "raft", s.StorageType)
	assert.Contains(t, s.String(), "sealed (0 of 3 shares entered)")
}

func TestUnsealStopsAtThreshold(t *testing.T) {
	f := sealedVault()
	c := serve(t, f)
	s, err := c.UnsealWith(context.Background(), Shares(strings.NewReader("s2\n\n s4 \ns5\ns1\n")))
	require.NoError(t, err)
	assert.False(t, s.Sealed)
	assert.Equal(t, 3, f.unsealCalls, "exactly the threshold's shares are sent; the fourth stays unread")
}

func TestUnsealRunsOutOfShares(t *testing.T) {
	c := serve(t, sealedVault())
	s, err := c.UnsealWith(context.Background(), Shares(strings.NewReader("s1\ns2\n")))
	require.ErrorIs(t, err, ErrStillSealed)
	assert.Contains(t, err.Error(), "2 of 3 shares entered")
	assert.True(t, s.Sealed)
}

func TestUnsealRefusesUninitializedAndSkipsUnsealed(t *testing.T) {
	f := sealedVault()
	f.initialized = false
	_, err := serve(t, f).UnsealWith(context.Background(), Shares(strings.NewReader("s1\n")))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "vault operator init")
	assert.Zero(t, f.unsealCalls)

	g := sealedVault()
	g.sealed = false
	s, err := serve(t, g).UnsealWith(context.Background(), func(SealStatus) (string, error) {
		return "", errors.New("no share may be asked of an unsealed vault")
	})
	require.NoError(t, err)
	assert.False(t, s.Sealed)
}

func TestUnsealReportsVaultErrors(t *testing.T) {
	c := serve(t, sealedVault())
	_, err := c.Unseal(context.Background(), "wrong")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "400")
	assert.Contains(t, err.Error(), "invalid key")
}

func TestEnableFileAuditOnce(t *testing.T) {
	f := sealedVault()
	c := serve(t, f)
	_, err := c.EnableFileAudit(context.Background(), "bad", "/vault/audit/vault_audit.log")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "permission denied")

	enabled, err := c.EnableFileAudit(context.Background(), "root", "/vault/audit/vault_audit.log")
	require.NoError(t, err)
	assert.True(t, enabled)
	require.Contains(t, f.audit, "file/")
	enabled, err = c.EnableFileAudit(context.Background(), "root", "/vault/audit/vault_audit.log")
	require.NoError(t, err)
	assert.False(t, enabled, "a second run finds the device and enables none")
}

func TestClientRefusesPlainHTTPAndUntrustedServers(t *testing.T) {
	_, err := NewClient("http://127.0.0.1:8200", []byte("x"))
	require.Error(t, err)

	srv := httptest.NewTLSServer(sealedVault())
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
