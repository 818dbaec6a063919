package config

import (
	"encoding/pem"
	pathpkg "path"
	"strings"
)

// The keys of the first machine config's way onto a Proxmox node: a snippet
// on the host's snippets datastore, uploaded by the provider over SSH, read
// by Talos from the node VM's nocloud drive (see firstBootConfigs).

// validateProxmoxFirstConfig checks milner:substrate.proxmox.snippetsDatastore
// and .ssh. Both are required: without them the first config would go to
// the node over the LAN, unauthenticated.
func (c *Config) validateProxmoxFirstConfig(p *problems) {
	px := c.Substrate.Proxmox
	path := Key("substrate") + ".proxmox."
	if px.SnippetsDatastore == "" {
		p.addf(path+"snippetsDatastore", "is required: each node's first machine config is a snippet there (a datastore with the Snippets content type)")
	}
	// Only the nocloud platform reads the drive's user-data (Talos picks
	// its platform from the image: the image factory names it in the file,
	// nocloud-amd64.qcow2); a metal image would ignore the first config and
	// wait in maintenance mode for one over the LAN.
	if base := pathpkg.Base(px.ImageURL); !strings.Contains(base, "nocloud") {
		p.addf(path+"imageUrl", "%q is not a Talos nocloud image (its file name has no \"nocloud\"): only the nocloud platform reads the first machine config from the cloud-init drive", base)
	}
	switch s := px.SSH; {
	case s == nil:
		p.addf(path+"ssh", "is required: the provider uploads the first machine configs to the hosts over SSH ({username, agent})")
	case s.Username == "":
		p.addf(path+"ssh.username", "is required (an API token names no SSH user)")
	case strings.ContainsAny(s.Username, " \t\n@:"):
		p.addf(path+"ssh.username", "%q is not a user name", s.Username)
	}
}

// checkProxmoxSSHKey checks how the provider authenticates over SSH: either
// the agent (ssh.agent: true) or the secret key milner:proxmoxSshPrivateKey
// holding an unencrypted PEM private key (the provider cannot ask for a
// passphrase), not both.
func checkProxmoxSSHKey(src ConfigSource, px *ProxmoxConfig, p *problems) {
	if px == nil || px.SSH == nil {
		return
	}
	full := Key(ProxmoxSSHKeyKey)
	v, _ := src.GetConfig(full)
	if px.SSH.Agent {
		if v != "" {
			p.addf(Key("substrate")+".proxmox.ssh.agent", "is true and the secret %s is set too: use one of them", full)
		}
		return
	}
	n := len(p.errs)
	checkSecret(src, ProxmoxSSHKeyKey, "substrate.proxmox.ssh without agent: true", p)
	if len(p.errs) > n {
		return
	}
	block, _ := pem.Decode([]byte(v))
	switch {
	case block == nil || !strings.HasSuffix(block.Type, "PRIVATE KEY"):
		p.addf(full, "is not a PEM private key")
	case block.Type == "ENCRYPTED PRIVATE KEY" || strings.Contains(block.Headers["Proc-Type"], "ENCRYPTED"):
		p.addf(full, "is an encrypted private key; the provider needs it unencrypted (or use ssh.agent: true)")
	}
}
