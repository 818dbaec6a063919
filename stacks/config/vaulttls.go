package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"time"
)

// PlaceholderSecret is the value tools that load a stack without its
// passphrase (docs, check) give every secret key: what Pulumi's blinding
// decrypter (sdk/v3 go/common/resource/config/crypt.go) returns for every
// secure value. The Vault TLS material is checked only when it is real: a
// placeholder is no certificate.
const PlaceholderSecret = "[secret]"

// checkVaultTLS checks the Vault app's TLS secret keys before anything is
// touched, as the pods will need them: the key is the certificate's (the
// listener would not start), the certificate covers every name of
// VaultTLSNames (clients, raft peers and the chart's own probes would refuse
// it), the CA signs it (the peers' retry_join verifies with ca.crt), and it
// is valid now. now is the time it is checked at.
func checkVaultTLS(src ConfigSource, cfg *Config, now time.Time, p *problems) {
	for _, a := range cfg.Apps {
		if a.Vault != nil {
			vaultTLS(src, a, now, p)
		}
	}
}

func vaultTLS(src ConfigSource, a AppConfig, now time.Time, p *problems) {
	certKey, keyKey, caKey := Key(VaultTLSCertKey), Key(VaultTLSKeyKey), Key(VaultTLSCAKey)
	certPEM, ok1 := src.GetConfig(certKey)
	keyPEM, ok2 := src.GetConfig(keyKey)
	caPEM, ok3 := src.GetConfig(caKey)
	if !ok1 || !ok2 || !ok3 || certPEM == "" || keyPEM == "" || caPEM == "" {
		return // checkSecret reports it
	}
	if certPEM == PlaceholderSecret && keyPEM == PlaceholderSecret && caPEM == PlaceholderSecret {
		return
	}
	chain, err := parseCerts(certPEM)
	if err != nil {
		p.addf(certKey, "%v", err)
		return
	}
	leaf := chain[0]
	if _, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM)); err != nil {
		p.addf(keyKey, "is not the private key of %s: %v", certKey, err)
	}
	full := VaultFullname(a.ReleaseName)
	var missing []string
	for _, name := range a.VaultTLSNames() {
		// A raft peer is addressed as <fullname>-<i>.<fullname>-internal
		// (the retry_join addresses of vaultProfile): check each peer's name.
		hosts := []string{name}
		if strings.HasPrefix(name, "*.") {
			hosts = nil
			for i := 0; i < a.Vault.Replicas; i++ {
				hosts = append(hosts, fmt.Sprintf("%s-%d%s", full, i, name[1:]))
			}
		}
		for _, h := range hosts {
			if err := leaf.VerifyHostname(h); err != nil {
				missing = append(missing, h)
			}
		}
	}
	if len(missing) > 0 {
		p.addf(certKey, "does not cover %s (app %q needs every name of %s); issue one that does and set it: docs/runbooks/vault.md#rotate-the-listener-certificate", strings.Join(missing, ", "), a.Name, strings.Join(a.VaultTLSNames(), ", "))
	}
	switch {
	case now.After(leaf.NotAfter):
		p.addf(certKey, "expired on %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		p.addf(certKey, "is not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	cas, err := parseCerts(caPEM)
	if err != nil {
		p.addf(caKey, "%v", err)
		return
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, c := range cas {
		roots.AddCert(c)
	}
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	// Validity is reported above; here only the signature chain counts.
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: leaf.NotBefore.Add(time.Second), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		p.addf(caKey, "does not sign %s: %v", certKey, err)
	}
}

// parseCerts parses every CERTIFICATE block of a PEM bundle.
func parseCerts(s string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := []byte(s)
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("not a certificate: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("holds no PEM certificate")
	}
	return out, nil
}

// VaultFullname is the chart's fullname of a release (vault-helm
// _helpers.tpl "vault.fullname": the release name when it contains the
// chart name, else <release>-vault): the StatefulSet, and the headless
// service "<fullname>-internal" the raft peers find each other through.
func VaultFullname(release string) string {
	if strings.Contains(release, VaultChart) {
		return release
	}
	return release + "-" + VaultChart
}

// VaultTLSNames are the names the Vault app's certificate must cover:
// the chart's (VaultTLSNames) and its exposed host name, which the
// workstation reaches it at through the load balancer.
func (a AppConfig) VaultTLSNames() []string {
	names := VaultTLSNames(a.ReleaseName, a.Namespace)
	if a.Expose != nil && a.Expose.Host != "" {
		names = append(names, a.Expose.Host)
	}
	return names
}

// VaultTLSNames are the names Vault's certificate must cover: the service
// clients use, every raft peer through the headless service, and the
// loopback address the chart's own probes and `vault` CLI in the pod use
// (VAULT_ADDR is https://127.0.0.1:8200 with TLS on).
func VaultTLSNames(release, namespace string) []string {
	full := VaultFullname(release)
	return []string{
		fmt.Sprintf("%s.%s.svc", full, namespace),
		fmt.Sprintf("%s.%s.svc.cluster.local", full, namespace),
		fmt.Sprintf("*.%s-internal", full),
		fmt.Sprintf("*.%s-internal.%s.svc.cluster.local", full, namespace),
		"127.0.0.1",
	}
}
