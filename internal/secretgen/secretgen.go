// Package secretgen makes the secrets a new stack needs that nobody hands
// the operator: the stack passphrase, the Woodpecker agent secret, and a
// Vault CA with a server certificate for exactly the names Vault answers
// on. Certificates come from siderolabs/crypto's x509 package (the one
// Talos' own PKI uses), never from hand-rolled templates.
package secretgen

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"net"
	"time"

	sx509 "github.com/siderolabs/crypto/x509"
)

// Validity of what NewVaultTLS issues: the CA for ten years, the server
// certificate for 825 days (the longest lifetime Apple's TLS policy, and
// with it most clients, accepts for a server certificate).
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 825 * 24 * time.Hour
)

// Token returns 32 random bytes, hex-encoded: a passphrase or a shared
// secret such as Woodpecker's agent secret.
func Token() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// VaultTLS is a CA and a server certificate it signed, PEM-encoded.
type VaultTLS struct {
	CA, CAKey, Cert, Key []byte
}

// NewVaultTLS makes a self-signed ECDSA P-256 CA and a server certificate
// whose subject alternative names are exactly names (IP addresses as IP
// SANs, the rest as DNS SANs); the first name is its common name.
func NewVaultTLS(names []string) (*VaultTLS, error) {
	if len(names) == 0 {
		return nil, errors.New("vault tls: no names to certify")
	}
	var dns []string
	var ips []net.IP
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, n)
		}
	}
	now := time.Now()
	ca, err := sx509.NewSelfSignedCertificateAuthority(
		sx509.ECDSA(true),
		sx509.Organization("milner vault CA"),
		sx509.NotBefore(now), sx509.NotAfter(now.Add(CAValidity)),
	)
	if err != nil {
		return nil, err
	}
	kp, err := sx509.NewKeyPair(ca,
		sx509.CommonName(names[0]),
		sx509.DNSNames(dns), sx509.IPAddresses(ips),
		sx509.KeyUsage(x509.KeyUsageDigitalSignature),
		sx509.ExtKeyUsage([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}),
		sx509.NotBefore(now), sx509.NotAfter(now.Add(ServerValidity)),
	)
	if err != nil {
		return nil, err
	}
	return &VaultTLS{CA: ca.CrtPEM, CAKey: ca.KeyPEM, Cert: kp.CrtPEM, Key: kp.KeyPEM}, nil
}
