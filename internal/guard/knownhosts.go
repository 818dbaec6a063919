package guard

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyFunc returns the key the SSH server at addr (host:port) shows
// when offered the given host key algorithms.
type HostKeyFunc func(ctx context.Context, addr string, algorithms []string) (ssh.PublicKey, error)

// KnownHosts returns a finding for each Proxmox host (PVE node → the
// address the provider opens SSH to) that has no entry in the known_hosts
// file at path, or, when keyOf is given, whose SSH server shows another key
// than its entry. The bpg provider's SSH client (v7.13.0's SDK has no
// host-key setting) accepts the key of a host it does not know and appends
// it to ~/.ssh/known_hosts (bpg proxmox/ssh/client.go openNodeShell: "a
// custom permissive host key callback ... allows unknown hosts"): the
// first snippet upload, carrying a node's machine config and the
// cluster's CA keys, would go to whoever answers. A host it knows with
// another key bpg refuses itself ("REMOTE HOST IDENTIFICATION HAS
// CHANGED"), but only when it uploads, mid-apply: the images and holders
// may be made by then. A missing file knows no host. A host keyOf cannot
// reach is not a finding: the provider dials it only to upload a snippet,
// and says so if it cannot.
func KnownHosts(ctx context.Context, path string, hosts map[string]string, keyOf HostKeyFunc) ([]Finding, error) {
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
		hostPort := net.JoinHostPort(addr, "22")
		remote := &net.TCPAddr{IP: net.ParseIP(addr), Port: 22}
		if check != nil {
			var ke *knownhosts.KeyError
			err := check(hostPort, remote, probe)
			if errors.As(err, &ke) && len(ke.Want) > 0 {
				if f := changedKey(ctx, node, addr, path, ke.Want, keyOf); f != nil {
					out = append(out, *f)
				}
				continue
			}
			if !errors.As(err, &ke) {
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

// changedKey asks the host for a key of the types known_hosts holds for it
// (as bpg's client does, skeema/knownhosts HostKeyAlgorithms) and returns
// a finding when it shows none of the known ones.
func changedKey(ctx context.Context, node, addr, path string, want []knownhosts.KnownKey, keyOf HostKeyFunc) *Finding {
	if keyOf == nil {
		return nil
	}
	var algos []string
	for _, k := range want {
		if t := k.Key.Type(); t == ssh.KeyAlgoRSA {
			algos = append(algos, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		} else {
			algos = append(algos, t)
		}
	}
	live, err := keyOf(ctx, net.JoinHostPort(addr, "22"), slices.Compact(algos))
	if err != nil {
		return nil
	}
	for _, k := range want {
		if string(k.Key.Marshal()) == string(live.Marshal()) {
			return nil
		}
	}
	return &Finding{
		Problem: fmt.Sprintf("Proxmox host %q (%s) shows another SSH host key (%s) than %s holds for it (line %d): a reinstalled host, or a machine in its place; the provider refuses it only mid-apply, after the images and disk holders may be made", node, addr, ssh.FingerprintSHA256(live), path, want[0].Line),
		Fix:     fmt.Sprintf("check the host's key on its console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub); if it is the host's, replace its entry: ssh-keygen -R %s -f %s, then ssh-keyscan -t ed25519 %s >> %s", addr, path, addr, path),
	}
}

// DialHostKey is a HostKeyFunc: the key the server shows in an SSH
// handshake, which is abandoned before any authentication.
func DialHostKey(ctx context.Context, addr string, algorithms []string) (ssh.PublicKey, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var shown ssh.PublicKey
	errShown := errors.New("host key read")
	_, _, _, err = ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User:              "milner-preflight",
		HostKeyAlgorithms: algorithms,
		HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error {
			shown = k
			return errShown
		},
	})
	if shown != nil {
		return shown, nil
	}
	return nil, err
}
