// Package vault is the operator's unseal procedure over Vault's HTTP API,
// spoken by HashiCorp's own Go client (github.com/hashicorp/vault/api):
// seal status, unseal with key shares the operator supplies, and the file
// audit device. Key shares and tokens are read from a file, stdin or the
// terminal without echo (source.go) and pass through memory only: nothing
// here writes them anywhere.
//
// The endpoints, as documented by HashiCorp (developer.hashicorp.com/vault/api-docs):
//   - GET  /v1/sys/seal-status: unauthenticated; type, initialized, sealed, t, n, progress, version, ...
//   - PUT  /v1/sys/unseal {"key": share}: the same seal status after the share.
//   - GET  /v1/sys/audit (token): the enabled audit devices by path.
//   - PUT  /v1/sys/audit/<path> {"type": "file", "options": {"file_path": ...}} (token).
package vault

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/vault/api"
)

// SealStatus is Vault's seal status (/v1/sys/seal-status and /v1/sys/unseal).
type SealStatus api.SealStatusResponse

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
type Client struct{ api *api.Client }

// NewClient returns a client of the Vault at addr (https:// only: Milner's
// Vault listens with TLS alone) that trusts the CA certificates in caPEM
// alone, and sends no token but the one a call is given (VAULT_TOKEN is
// cleared; requests are not retried).
func NewClient(addr string, caPEM []byte) (*Client, error) {
	if !strings.HasPrefix(addr, "https://") {
		return nil, fmt.Errorf("vault address %q: want https:// (the listener is TLS only)", addr)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("vault CA: no PEM certificate found")
	}
	c, err := api.NewClient(&api.Config{
		Address:    addr,
		HttpClient: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}},
		Timeout:    30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("vault client: %w", err)
	}
	c.ClearToken()
	return &Client{api: c}, nil
}

// SealStatus reads the seal status.
func (c *Client) SealStatus(ctx context.Context) (SealStatus, error) {
	return status(c.api.Sys().SealStatusWithContext(ctx))
}

// Unseal enters one key share and returns the status after it.
func (c *Client) Unseal(ctx context.Context, share string) (SealStatus, error) {
	return status(c.api.Sys().UnsealWithContext(ctx, share))
}

func status(s *api.SealStatusResponse, err error) (SealStatus, error) {
	if err != nil {
		return SealStatus{}, fmt.Errorf("vault: %w", err)
	}
	return SealStatus(*s), nil
}

// ErrStillSealed is returned when the shares ran out before Vault unsealed.
var ErrStillSealed = errors.New("vault is still sealed")

// JoinWait bounds the wait for a raft follower that took its threshold of
// shares to unseal itself (UnsealWith).
var JoinWait = 2 * time.Minute

// joinPoll is how often the wait asks: Vault looks for the keyring once a
// second (vault v1.18.1 vault/core.go, unsealWithRaft).
const joinPoll = time.Second

// UnsealWith enters shares from next until Vault is unsealed. next returns
// the next share, or io.EOF when there are no more. A Vault that is not
// initialized is an error (initialize it first: `vault operator init`); one
// that is already unsealed takes no share.
//
// A raft follower joining its leader (retry_join) unseals later: with the
// threshold's shares Vault answers still sealed, progress 0, and unseals
// in the background once the leader's keyring has reached its storage
// (vault v1.18.1 vault/core.go, unsealFragment and unsealWithRaft). Then
// UnsealWith waits up to JoinWait for it instead of asking for more shares.
func (c *Client) UnsealWith(ctx context.Context, next func(SealStatus) (string, error)) (SealStatus, error) {
	s, err := c.SealStatus(ctx)
	if err != nil {
		return s, err
	}
	if !s.Initialized {
		msg := "vault is not initialized: run `vault operator init` first (docs/runbooks/vault.md)"
		if s.StorageType == "raft" {
			// Vault reports a follower initialized once its retry_join has
			// reached a leader (vault/init.go Initialized, isRaftUnseal).
			msg = "vault is not initialized: on the first server run `vault operator init` (docs/runbooks/vault.md); " +
				"a raft follower says this until its retry_join reaches an unsealed leader: run this again in a moment"
		}
		return s, errors.New(msg)
	}
	for s.Sealed {
		share, err := next(s)
		if errors.Is(err, io.EOF) {
			return s, fmt.Errorf("%w: %d of %d shares entered", ErrStillSealed, s.Progress, s.T)
		}
		if err != nil {
			return s, err
		}
		before := s
		if s, err = c.Unseal(ctx, share); err != nil {
			return s, err
		}
		if s.Sealed && s.Progress == 0 && before.Progress+1 >= before.T {
			return c.awaitJoin(ctx, s)
		}
	}
	return s, nil
}

// awaitJoin waits up to JoinWait for a raft follower that took its
// threshold of shares to unseal.
func (c *Client) awaitJoin(ctx context.Context, s SealStatus) (SealStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, JoinWait)
	defer cancel()
	for s.Sealed {
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("%w %s after the threshold's shares: a raft follower unseals once its leader's keyring reaches it; "+
				"check `vault operator raft list-peers` on the leader and this server's log (docs/runbooks/vault.md)", ErrStillSealed, JoinWait)
		case <-time.After(joinPoll):
		}
		now, err := c.SealStatus(ctx)
		if err != nil && ctx.Err() == nil {
			return s, err
		}
		if err == nil {
			s = now
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

// EnableFileAudit enables a file audit device writing to filePath at path
// "file/", unless a file device with that path is already enabled, with
// token (allowed to read and enable sys/audit). It reports whether it
// enabled one.
func (c *Client) EnableFileAudit(ctx context.Context, token, filePath string) (bool, error) {
	authed, err := c.api.Clone()
	if err != nil {
		return false, fmt.Errorf("vault client: %w", err)
	}
	authed.SetToken(token)
	sys := authed.Sys()
	devices, err := sys.ListAuditWithContext(ctx)
	if err != nil {
		return false, fmt.Errorf("vault: audit devices: %w", err)
	}
	for _, d := range devices {
		if d.Type == "file" && d.Options["file_path"] == filePath {
			return false, nil
		}
	}
	opts := &api.EnableAuditOptions{Type: "file", Options: map[string]string{"file_path": filePath}}
	if err := sys.EnableAuditWithOptionsWithContext(ctx, "file", opts); err != nil {
		return false, fmt.Errorf("vault: enable the file audit device: %w", err)
	}
	return true, nil
}
