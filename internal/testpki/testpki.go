// Package testpki issues throwaway certificates for tests: a CA and a
// server certificate it signs, as an operator's PKI would hand them to
// Milner (e.g. Vault's listener). Never used by the program.
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

// Bundle is a server certificate, its key and the CA that signed it, PEM.
type Bundle struct {
	Cert, Key, CA string
}

// Issue returns a fresh CA and a server certificate for names (DNS names or
// IP addresses), valid from notBefore to notAfter. It panics on a crypto
// failure, which only a broken machine produces.
func Issue(names []string, notBefore, notAfter time.Time) Bundle {
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "milner test CA"},
		NotBefore: notBefore.Add(-time.Hour), NotAfter: notAfter.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER := must(x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey))
	ca := must(x509.ParseCertificate(caDER))
	key := newKey()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey))
	return Bundle{Cert: encode("CERTIFICATE", der), Key: encode("EC PRIVATE KEY", must(x509.MarshalECPrivateKey(key))), CA: encode("CERTIFICATE", caDER)}
}

// Valid is Issue for a certificate valid from an hour ago for a year.
func Valid(names ...string) Bundle {
	now := time.Now()
	return Issue(names, now.Add(-time.Hour), now.Add(365*24*time.Hour))
}

func newKey() *ecdsa.PrivateKey { return must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)) }

func encode(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
