// Package vaultapi is a Vault API double for tests: the seal-status,
// unseal and audit endpoints answered as Vault documents them
// (developer.hashicorp.com/vault/api-docs/system/seal-status, .../unseal,
// .../audit). Seal-status is unauthenticated; each unseal share raises
// progress until the threshold, then Vault unseals and progress is 0; a
// reset discards the shares entered; errors are {"errors": [...]};
// sys/audit needs X-Vault-Token. A raft follower (JoinAfter) takes the
// threshold's shares and stays sealed, progress 0, until it unseals itself
// once the leader's keyring has reached it (vault v1.18.1 vault/core.go
// unsealWithRaft). Only tests link it.
package vaultapi

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Vault is one Vault server's seal and audit state.
type Vault struct {
	mu          sync.Mutex
	Initialized bool
	Sealed      bool
	// Shares are the valid key shares; T is the threshold.
	Shares []string
	T      int
	// JoinAfter, when set, makes this a raft follower joining its leader:
	// it unseals this long after the threshold's shares.
	JoinAfter time.Duration
	// Token is the one token sys/audit accepts.
	Token string
	// Audit holds the enabled audit devices by path ("file/").
	Audit       map[string]any
	entered     []string
	unsealCalls int
}

// Sealed is an initialised, sealed Vault of five shares ("s1".."s5"),
// threshold three, whose token is "root".
func Sealed() *Vault {
	return &Vault{Initialized: true, Sealed: true, Shares: []string{"s1", "s2", "s3", "s4", "s5"}, T: 3, Token: "root", Audit: map[string]any{}}
}

// UnsealCalls is how many unseal requests Vault answered.
func (f *Vault) UnsealCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unsealCalls
}

// Serve starts f over TLS for the test's life and returns its https://
// address and the PEM of the certificate it serves (its own CA).
func Serve(t *testing.T, f *Vault) (addr string, caPEM []byte) {
	t.Helper()
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	return srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func (f *Vault) status() map[string]any {
	return map[string]any{
		"type": "shamir", "initialized": f.Initialized, "sealed": f.Sealed,
		"t": f.T, "n": len(f.Shares), "progress": len(f.entered), "nonce": "",
		"version": "1.19.0", "storage_type": "raft",
	}
}

func (f *Vault) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
		for _, s := range f.Shares {
			valid = valid || s == body.Key
		}
		if !valid {
			f.entered = nil
			fail(400, "invalid key")
			return
		}
		f.entered = append(f.entered, body.Key)
		switch {
		case len(f.entered) >= f.T && f.JoinAfter > 0:
			f.entered = nil
			time.AfterFunc(f.JoinAfter, func() {
				f.mu.Lock()
				defer f.mu.Unlock()
				f.Sealed = false
			})
		case len(f.entered) >= f.T:
			f.Sealed, f.entered = false, nil
		}
		reply(200, f.status())
	case r.URL.Path == "/v1/sys/audit" || strings.HasPrefix(r.URL.Path, "/v1/sys/audit/"):
		if r.Header.Get("X-Vault-Token") != f.Token {
			fail(403, "permission denied")
			return
		}
		if r.Method == http.MethodGet {
			out := map[string]any{"request_id": "x", "data": f.Audit}
			for k, v := range f.Audit {
				out[k] = v
			}
			reply(200, out)
			return
		}
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.Audit[strings.TrimPrefix(r.URL.Path, "/v1/sys/audit/")+"/"] = body
		w.WriteHeader(204)
	default:
		fail(404, "unsupported path")
	}
}
