// Package testpki issues throwaway certificates for tests: a CA and the
// server and client certificates it signs, as an operator's PKI would hand
// them to Milner (e.g. Vault's listener) or as a Kubernetes API server's
// PKI holds them (tests/kubeapi). Never used by the program.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"time"
)

// Bundle is a certificate, its key and the CA that signed it, PEM.
type Bundle struct {
	Cert, Key, CA string
}

// CA is a throwaway certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA returns a fresh CA valid from notBefore to notAfter. It panics on a
// crypto failure, which only a broken machine produces (as every function
// here does).
func NewCA(notBefore, notAfter time.Time) *CA {
	key := newKey()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "milner test CA"},
		NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key))
	return &CA{cert: must(x509.ParseCertificate(der)), key: key}
}

// Server returns a server certificate for names (DNS names or IP
// addresses), valid from notBefore to notAfter.
func (ca *CA) Server(names []string, notBefore, notAfter time.Time) Bundle {
	tmpl := &x509.Certificate{
		Subject: pkix.Name{CommonName: names[0]}, NotBefore: notBefore, NotAfter: notAfter,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return ca.sign(tmpl)
}

// Client returns a client certificate of user cn in the groups orgs (the
// subject's CN and O, as Kubernetes reads them), valid from an hour ago
// for a year.
func (ca *CA) Client(cn string, orgs ...string) Bundle {
	now := time.Now()
	return ca.sign(&x509.Certificate{
		Subject: pkix.Name{CommonName: cn, Organization: orgs}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(year),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) sign(tmpl *x509.Certificate) Bundle {
	key := newKey()
	tmpl.SerialNumber = must(rand.Int(rand.Reader, big.NewInt(1<<62)))
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key))
	return Bundle{Cert: encode("CERTIFICATE", der), Key: encodeKey(key), CA: encode("CERTIFICATE", ca.cert.Raw)}
}

// Issue returns a fresh CA and a server certificate for names, valid from
// notBefore to notAfter (the CA an hour longer each side).
func Issue(names []string, notBefore, notAfter time.Time) Bundle {
	return NewCA(notBefore.Add(-time.Hour), notAfter.Add(time.Hour)).Server(names, notBefore, notAfter)
}

// Valid is Issue for a certificate valid from an hour ago for a year.
func Valid(names ...string) Bundle {
	now := time.Now()
	return Issue(names, now.Add(-time.Hour), now.Add(year))
}

// Key returns a fresh private key, PEM (e.g. a service-account signing key).
func Key() string { return encodeKey(newKey()) }

const year = 365 * 24 * time.Hour

func newKey() *ecdsa.PrivateKey { return must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)) }

func encodeKey(k *ecdsa.PrivateKey) string {
	return encode("EC PRIVATE KEY", must(x509.MarshalECPrivateKey(k)))
}

func encode(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
