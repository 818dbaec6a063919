// Package pve is a small Proxmox VE API client: the few reads and the one
// write Milner makes outside the Pulumi provider (the empty-state guard, the
// privilege preflight, and clearing holder protection in a confirmed
// teardown). TLS is verified against the system roots, as the bpg provider
// verifies it, so a self-signed PVE CA is trusted the same way for both
// (SSL_CERT_FILE / SSL_CERT_DIR, docs/proxmox.md "TLS").
package pve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client talks to one Proxmox VE API endpoint with an API token.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// New returns a client of the API at endpoint (https://host:8006/) that
// authenticates with token (user@realm!tokenid=secret). roots are the CAs
// to trust; nil means the system roots (which honour SSL_CERT_FILE). With
// insecure the server's certificate is not verified at all; config
// validation allows that only with an explicit acknowledgement.
func New(endpoint, token string, insecure bool, roots *x509.CertPool) (*Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("pve: endpoint %q is not an https:// URL", endpoint)
	}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{
			RootCAs:            roots,
			InsecureSkipVerify: insecure, //nolint:gosec // only with insecureAcknowledged (stacks/validate_placement.go)
			MinVersion:         tls.VersionTLS12,
		},
	}
	return &Client{base: u, token: token, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// do sends one API request and decodes the "data" member of the reply into
// out (nil: ignore it). The PVE API wraps every result as {"data": ...}.
func (c *Client) do(ctx context.Context, method, path string, form url.Values, out any) error {
	path, query, _ := strings.Cut(path, "?")
	u := c.base.JoinPath("api2", "json", path)
	u.RawQuery = query
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("pve %s %s: %w", method, path, err)
	}
	// PVE admin guide, "API Tokens": the header is
	// "Authorization: PVEAPIToken=USER@REALM!TOKENID=UUID".
	req.Header.Set("Authorization", "PVEAPIToken="+c.token)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("pve %s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("pve %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		// PVE puts the reason in the status line (e.g. "403 Permission check failed").
		return fmt.Errorf("pve %s %s: %s", method, path, resp.Status)
	}
	if out == nil {
		return nil
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("pve %s %s: decode: %w", method, path, err)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("pve %s %s: decode data: %w", method, path, err)
	}
	return nil
}

// VM is one guest of GET /cluster/resources?type=vm.
type VM struct {
	// Type is "qemu" or "lxc".
	Type string `json:"type"`
	// VMID is the guest's id.
	VMID int `json:"vmid"`
	// Name is the guest's name.
	Name string `json:"name"`
	// Node is the PVE node (host) the guest is on.
	Node string `json:"node"`
	// Status is "running", "stopped", ...
	Status string `json:"status"`
}

// VMs lists every guest of the cluster, on every host.
func (c *Client) VMs(ctx context.Context) ([]VM, error) {
	var vms []VM
	err := c.do(ctx, http.MethodGet, "cluster/resources?type=vm", nil, &vms)
	return vms, err
}

// VMConfig returns the current config of QEMU guest vmid on node: keys as
// qm shows them (name, protection, scsi0 "local-lvm:vm-150-disk-0,size=64G", ...).
func (c *Client) VMConfig(ctx context.Context, node string, vmid int) (map[string]any, error) {
	var cfg map[string]any
	err := c.do(ctx, http.MethodGet, "nodes/"+url.PathEscape(node)+"/qemu/"+strconv.Itoa(vmid)+"/config", nil, &cfg)
	return cfg, err
}

// SetProtection sets or clears PVE's own protection flag of a QEMU guest
// (PUT /nodes/{node}/qemu/{vmid}/config protection=0|1; PVE refuses to
// remove a protected guest or its disks).
func (c *Client) SetProtection(ctx context.Context, node string, vmid int, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	return c.do(ctx, http.MethodPut, "nodes/"+url.PathEscape(node)+"/qemu/"+strconv.Itoa(vmid)+"/config",
		url.Values{"protection": {v}}, nil)
}

// Permissions returns the caller's effective privileges by ACL path (GET
// /access/permissions): for an API token with privilege separation, the
// intersection of the user's and the token's.
func (c *Client) Permissions(ctx context.Context) (map[string]map[string]int, error) {
	var perms map[string]map[string]int
	err := c.do(ctx, http.MethodGet, "access/permissions", nil, &perms)
	return perms, err
}
