package guard

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// KnownHosts returns a finding for each Proxmox host (PVE node → the
// address the provider opens SSH to) that has no entry in the known_hosts
// file at path. The bpg provider's SSH client (v7.13.0's SDK has no
// host-key setting) accepts the key of a host it does not know and appends
// it to ~/.ssh/known_hosts (bpg proxmox/ssh/client.go openNodeShell: "a
// custom permissive host key callback ... allows unknown hosts"): the
// first snippet upload, carrying a node's machine config and the
// cluster's CA keys, would go to whoever answers. A host it knows with
// another key is refused by bpg itself. A missing file knows no host.
func KnownHosts(path string, hosts map[string]string) ([]Finding, error) {
	var check ssh.HostKeyCallback
	if _, err := os.Stat(path); err == nil {
		if check, err = knownhosts.New(path); err != nil {
			return nil, fmt.Errorf("known_hosts %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("known_hosts: %w", err)
	}
	// A key no host has: the callback's answer says whether it knows the
	// host at all (KeyError.Want lists the keys it has for it).
	probe, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, node := range slices.Sorted(maps.Keys(hosts)) {
		addr := hosts[node]
		if check != nil {
			var ke *knownhosts.KeyError
			err := check(net.JoinHostPort(addr, "22"), &net.TCPAddr{IP: net.ParseIP(addr), Port: 22}, probe)
			if !errors.As(err, &ke) || len(ke.Want) > 0 {
				continue
			}
		}
		out = append(out, Finding{
			Problem: fmt.Sprintf("Proxmox host %q (%s, where the provider uploads the first machine configs over SSH: milner:substrate.proxmox.ssh) is not in %s; the provider would accept any key it is shown there and send it the nodes' machine configs and CA keys", node, addr, path),
			Fix: fmt.Sprintf("check the host's key on its console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), compare it with `ssh-keyscan -t ed25519 %s | ssh-keygen -lf -`, then add it: ssh-keyscan -t ed25519 %s >> %s (ssh-keygen -F %s -f %s shows it)",
				addr, addr, path, addr, path),
		})
	}
	return out, nil
}
