package pve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// SSHAddress returns the address the bpg provider opens SSH to on host
// node for a snippet upload, found as its API resolver finds it
// (bpg terraform-provider-proxmox fwprovider/provider.go apiResolver.Resolve,
// from GET /nodes/{node}/network): the IPv4 address of an interface with a
// gateway, else the IPv6 one with an IPv6 gateway, else the first IPv4
// address, else the host name's IPv4 address in DNS. Port 22.
func (c *Client) SSHAddress(ctx context.Context, node string) (string, error) {
	var ifaces []struct {
		Address  *string `json:"address"`
		Gateway  *string `json:"gateway"`
		Address6 *string `json:"address6"`
		Gateway6 *string `json:"gateway6"`
	}
	if err := c.do(ctx, http.MethodGet, "nodes/"+url.PathEscape(node)+"/network", nil, &ifaces); err != nil {
		return "", err
	}
	// The first interface of each kind, in the resolver's order of preference.
	var picked [3]string
	for _, i := range ifaces {
		for k, a := range []*string{and(i.Address, i.Gateway), and(i.Address6, i.Gateway6), i.Address} {
			if a != nil && picked[k] == "" {
				picked[k], _, _ = strings.Cut(*a, "/")
			}
		}
	}
	for _, addr := range picked {
		if addr != "" {
			return addr, nil
		}
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, node)
	if err == nil {
		for _, ip := range ips {
			if ip.IP.To4() != nil {
				return ip.IP.String(), nil
			}
		}
	}
	return "", fmt.Errorf("pve host %q: no address for SSH in GET /nodes/%s/network or DNS", node, node)
}

// and returns a when both are set.
func and(a, b *string) *string {
	if a != nil && b != nil {
		return a
	}
	return nil
}
