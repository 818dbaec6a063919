// Package vault speaks the few endpoints of Vault's HTTP API that the
// operator's unseal procedure needs: seal status, unseal with key shares
// the operator supplies, and the file audit device. Key shares and tokens
// pass through memory only: nothing here writes them anywhere.
//
// The endpoints, as documented by HashiCorp (developer.hashicorp.com/vault/api-docs):
//   - GET  /v1/sys/seal-status: unauthenticated; type, initialized, sealed, t, n, progress, version, ...
//   - POST /v1/sys/unseal {"key": share}: the same seal status after the share;
//     {"reset": true} discards the shares entered so far.
//   - GET  /v1/sys/audit (token): the enabled audit devices by path.
//   - POST /v1/sys/audit/<path> {"type": "file", "options": {"file_path": ...}} (token).
//
// Errors come back as {"errors": ["..."]} with a non-2xx status.
package vault

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// SealStatus is Vault's seal status (/v1/sys/seal-status and /v1/sys/unseal).
type SealStatus struct {
	// Type is the seal type, e.g. shamir.
	Type string `json:"type"`
	// Initialized is false until `vault operator init` ran.
	Initialized bool `json:"initialized"`
	// Sealed is true while Vault cannot decrypt its storage.
	Sealed bool `json:"sealed"`
	// T is the number of key shares needed to unseal.
	T int `json:"t"`
	// N is the number of key shares.
	N int `json:"n"`
	// Progress is the number of shares entered so far.
	Progress int `json:"progress"`
	// Version is Vault's version.
	Version string `json:"version"`
	// StorageType is the storage backend, e.g. raft.
	StorageType string `json:"storage_type"`
	// ClusterName is set once Vault is unsealed.
	ClusterName string `json:"cluster_name"`
}

// String renders the status for an operator.
func (s SealStatus) String() string {
	state := "unsealed"
	switch {
	case !s.Initialized:
		state = "not initialized"
	case s.Sealed:
		state = fmt.Sprintf("sealed (%d of %d shares entered)", s.Progress, s.T)
	}
	return fmt.Sprintf("vault %s: %s; seal %s, %d shares, threshold %d; storage %s", s.Version, state, s.Type, s.N, s.T, s.StorageType)
}

// Client talks to one Vault server over TLS.
type Client struct {
	addr string
	http *http.Client
}

// NewClient returns a client of the Vault at addr (https:// only: Milner's
// Vault listens with TLS alone) that trusts the CA certificates in caPEM.
func NewClient(addr string, caPEM []byte) (*Client, error) {
	if !strings.HasPrefix(addr, "https://") {
		return nil, fmt.Errorf("vault address %q: want https:// (the listener is TLS only)", addr)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("vault CA: no PEM certificate found")
	}
	return &Client{
		addr: strings.TrimSuffix(addr, "/"),
		http: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		},
	}, nil
}

// SealStatus reads the seal status.
func (c *Client) SealStatus(ctx context.Context) (SealStatus, error) {
	var s SealStatus
	err := c.do(ctx, http.MethodGet, "/v1/sys/seal-status", "", nil, &s)
	return s, err
}

// Unseal enters one key share and returns the status after it.
func (c *Client) Unseal(ctx context.Context, share string) (SealStatus, error) {
	var s SealStatus
	err := c.do(ctx, http.MethodPost, "/v1/sys/unseal", "", map[string]any{"key": share}, &s)
	return s, err
}

// ResetUnseal discards the shares entered so far.
func (c *Client) ResetUnseal(ctx context.Context) (SealStatus, error) {
	var s SealStatus
	err := c.do(ctx, http.MethodPost, "/v1/sys/unseal", "", map[string]any{"reset": true}, &s)
	return s, err
}

// ErrStillSealed is returned when the shares ran out before Vault unsealed.
var ErrStillSealed = errors.New("vault is still sealed")

// UnsealWith enters shares from next until Vault is unsealed. next returns
// the next share, or io.EOF when there are no more. A Vault that is not
// initialized is an error (initialize it first: `vault operator init`); one
// that is already unsealed takes no share.
func (c *Client) UnsealWith(ctx context.Context, next func(SealStatus) (string, error)) (SealStatus, error) {
	s, err := c.SealStatus(ctx)
	if err != nil {
		return s, err
	}
	if !s.Initialized {
		return s, errors.New("vault is not initialized: run `vault operator init` first (docs/runbooks/vault.md)")
	}
	for s.Sealed {
		share, err := next(s)
		if errors.Is(err, io.EOF) {
			return s, fmt.Errorf("%w: %d of %d shares entered", ErrStillSealed, s.Progress, s.T)
		}
		if err != nil {
			return s, err
		}
		if s, err = c.Unseal(ctx, share); err != nil {
			return s, err
		}
	}
	return s, nil
}

// Shares reads key shares from r, one per line; blank lines are skipped.
func Shares(r io.Reader) func(SealStatus) (string, error) {
	sc := bufio.NewScanner(r)
	return func(SealStatus) (string, error) {
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				return line, nil
			}
		}
		if err := sc.Err(); err != nil {
			return "", err
		}
		return "", io.EOF
	}
}

// AuditDevice is one enabled audit device.
type AuditDevice struct {
	// Type is the device type, e.g. file.
	Type string `json:"type"`
	// Options are the device options, e.g. file_path.
	Options map[string]string `json:"options"`
}

// AuditDevices lists the enabled audit devices by path (needs a token
// allowed to read sys/audit).
func (c *Client) AuditDevices(ctx context.Context, token string) (map[string]AuditDevice, error) {
	var raw map[string]json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/v1/sys/audit", token, nil, &raw); err != nil {
		return nil, err
	}
	out := map[string]AuditDevice{}
	for path, v := range raw {
		var d AuditDevice
		// The response also carries request metadata (request_id, data, ...):
		// only entries that decode as a device with a type are devices.
		if !strings.HasSuffix(path, "/") || json.Unmarshal(v, &d) != nil || d.Type == "" {
			continue
		}
		out[path] = d
	}
	return out, nil
}

// EnableFileAudit enables a file audit device writing to filePath at path
// "file/", unless a file device with that path is already enabled. It
// reports whether it enabled one.
func (c *Client) EnableFileAudit(ctx context.Context, token, filePath string) (bool, error) {
	devices, err := c.AuditDevices(ctx, token)
	if err != nil {
		return false, err
	}
	for _, d := range devices {
		if d.Type == "file" && d.Options["file_path"] == filePath {
			return false, nil
		}
	}
	body := map[string]any{"type": "file", "options": map[string]string{"file_path": filePath}}
	return true, c.do(ctx, http.MethodPost, "/v1/sys/audit/file", token, body, nil)
}

// do sends one request and decodes a JSON response into out (when non-nil).
func (c *Client) do(ctx context.Context, method, path, token string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.addr+path, rd)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("X-Vault-Token", token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("vault %s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }() // the body is read in full below
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("vault %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Errors []string `json:"errors"`
		}
		_ = json.Unmarshal(b, &e)
		return fmt.Errorf("vault %s %s: %s: %s", method, path, resp.Status, strings.Join(e.Errors, "; "))
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("vault %s %s: decode: %w", method, path, err)
	}
	return nil
}
