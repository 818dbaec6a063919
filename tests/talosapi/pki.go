package talosapi

import (
	"bytes"
	stdtls "crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/siderolabs/crypto/tls"
	"github.com/siderolabs/crypto/x509"
)

// maintenanceTLS is the maintenance service's TLS: its own self-signed
// CA's server certificate for the node's addresses, no client
// authentication (internal/app/maintenance/provider.go, TLSProvider; the
// certificate: secrets.MaintenanceServiceCerts). Clients skip verifying
// it (talosctl --insecure).
func maintenanceTLS(ip netip.Addr, hostname string) (*stdtls.Config, error) {
	ca, err := x509.NewSelfSignedCertificateAuthority(x509.ECDSA(true), x509.CommonName("maintenance-service"))
	if err != nil {
		return nil, err
	}
	cert, err := serverCertificate(ca, ip, hostname)
	if err != nil {
		return nil, err
	}
	return tls.New(tls.WithClientAuthType(tls.ServerOnly), tls.WithKeypair(cert))
}

// apidTLS is apid's server TLS (internal/app/apid/pkg/provider/provider.go,
// TLSConfig.ServerConfig): mutual TLS, clients verified against the
// machine CA and the accepted CAs (secrets.OSRoot), a server certificate
// from the machine CA (controllers/secrets/api.go: IP SANs, the hostname,
// ServerAuth), and with checkExtKeyUsage apid's verifyExtKeyUsage
// (internal/app/apid/main.go). issuer is the machine CA with its key: a
// control plane's own; a worker's config holds no key, and its
// certificate comes from a control plane's trustd (generateWorker), so
// issuer may fail until one runs, and apid does not answer until then.
func apidTLS(caCrt []byte, accepted []*x509.PEMEncodedCertificate, ip netip.Addr, hostname string, checkExtKeyUsage bool,
	issuer func() (*x509.PEMEncodedCertificateAndKey, error),
) (*stdtls.Config, error) {
	if len(caCrt) == 0 {
		return nil, errors.New("config has no machine.ca")
	}
	cas := [][]byte{caCrt}
	for _, a := range accepted {
		cas = append(cas, a.Crt)
	}
	cfg, err := tls.New(tls.WithClientAuthType(tls.Mutual), tls.WithCACertPEM(bytes.Join(cas, []byte("\n"))))
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		cert *stdtls.Certificate
	)
	cfg.GetCertificate = func(*stdtls.ClientHelloInfo) (*stdtls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		if cert != nil {
			return cert, nil
		}
		issuing, err := issuer()
		if err != nil {
			return nil, err
		}
		ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(issuing)
		if err != nil {
			return nil, fmt.Errorf("machine.ca: %w", err)
		}
		c, err := serverCertificate(ca, ip, hostname)
		if err != nil {
			return nil, err
		}
		cert = &c
		return cert, nil
	}
	if checkExtKeyUsage {
		cfg.VerifyPeerCertificate = verifyExtKeyUsage
	}
	return cfg, nil
}

// serverCertificate issues a server certificate from ca as Talos' secrets
// controllers do.
func serverCertificate(ca *x509.CertificateAuthority, ip netip.Addr, hostname string) (stdtls.Certificate, error) {
	kp, err := x509.NewKeyPair(ca,
		x509.IPAddresses([]net.IP{ip.AsSlice()}),
		x509.DNSNames([]string{hostname}),
		x509.CommonName(hostname),
		x509.NotAfter(time.Now().Add(x509.DefaultCertificateValidityDuration)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return stdtls.Certificate{}, fmt.Errorf("server certificate: %w", err)
	}
	return *kp.Certificate, nil
}

// verifyExtKeyUsage is apid's check of a client certificate's extended
// key usage (internal/app/apid/main.go, verifyExtKeyUsage).
func verifyExtKeyUsage(_ [][]byte, verifiedChains [][]*stdx509.Certificate) error {
	if len(verifiedChains) == 0 {
		return errors.New("no verified chains")
	}
	for _, cert := range verifiedChains[0] {
		if cert.IsCA {
			continue
		}
		if !slices.Equal(cert.ExtKeyUsage, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}) {
			return fmt.Errorf("certificate %q is missing the client auth extended key usage", cert.Subject)
		}
	}
	return nil
}
