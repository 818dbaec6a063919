// Package certs reads the lifetimes of a cluster's client certificates
// (the stack's talosconfig and admin kubeconfig outputs) and CAs (the
// secrets bundle), and issues new client certificates from the bundle's
// CAs with Talos' own code, without an apply.
//
// Why: the provider issues both client certificates once (talos_machine_secrets
// and the Talos Kubeconfig API, one year by default: machinery constants
// TalosAPIDefaultCertificateValidityDuration, KubernetesAdminCertDefaultLifetime)
// and renews them only when an apply regenerates them (terraform-provider-talos
// PR #167), so they expire silently.
package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	sidx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/kubeconfig"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/client-go/tools/clientcmd"
)

// WarnWithin is how close to its expiry a certificate is warned about.
const WarnWithin = 30 * 24 * time.Hour

// Cert is one certificate's lifetime.
type Cert struct {
	// Name says which certificate, e.g. "talosconfig client".
	Name string `json:"name"`
	// NotAfter is when it expires (zero when it could not be read).
	NotAfter time.Time `json:"notAfter"`
	// Renew is what renews it.
	Renew string `json:"renew"`
	// Err says why it could not be read ("" when it was).
	Err string `json:"error,omitempty"`
}

// Line is the certificate as `milner status` prints it at now, with a
// warning when it expires within WarnWithin.
func (c Cert) Line(now time.Time) string {
	if c.Err != "" {
		return fmt.Sprintf("%-28s unknown: %s", c.Name, c.Err)
	}
	left := c.NotAfter.Sub(now)
	line := fmt.Sprintf("%-28s expires %s (in %d days)", c.Name, c.NotAfter.UTC().Format(time.DateOnly), int(left.Hours()/24))
	switch {
	case left <= 0:
		return fmt.Sprintf("%-28s EXPIRED %s: %s", c.Name, c.NotAfter.UTC().Format(time.DateOnly), c.Renew)
	case left <= WarnWithin:
		return line + ": WARNING, renew it: " + c.Renew
	}
	return line
}

// Warn reports whether the certificate expires within WarnWithin of now.
func (c Cert) Warn(now time.Time) bool { return c.Err == "" && c.NotAfter.Sub(now) <= WarnWithin }

// Lifetimes reads the client certificates of the talosconfig and
// kubeconfig texts (the stack's outputs) and the CAs of the bundle (or
// bundleErr, why it could not be read); a missing input is an entry with
// its Err.
func Lifetimes(talosconfig, kubeconfigText string, bundle *secrets.Bundle, bundleErr error) []Cert {
	out := []Cert{
		read("talosconfig client", "milner talosconfig --renew", func() ([]byte, error) { return talosClientCert(talosconfig) }),
		read("kubeconfig client", "milner kubeconfig --renew", func() ([]byte, error) { return kubeClientCert(kubeconfigText) }),
	}
	cas := make([]*sidx509.PEMEncodedCertificateAndKey, 4)
	if bundleErr == nil && bundle != nil && bundle.Certs != nil {
		cas = []*sidx509.PEMEncodedCertificateAndKey{bundle.Certs.OS, bundle.Certs.K8s, bundle.Certs.K8sAggregator, bundle.Certs.Etcd}
	}
	for i, name := range []string{"Talos API CA", "Kubernetes CA", "Kubernetes aggregator CA", "etcd CA"} {
		out = append(out, read(name, "rotate the CA (Talos' CA rotation: talosctl rotate-ca)", func() ([]byte, error) {
			switch {
			case bundleErr != nil:
				return nil, bundleErr
			case cas[i] == nil:
				return nil, errors.New("no secrets bundle in the state")
			}
			return cas[i].Crt, nil
		}))
	}
	return out
}

// read parses the PEM certificate get returns into a Cert.
func read(name, renew string, get func() ([]byte, error)) Cert {
	c := Cert{Name: name, Renew: renew}
	crt, err := get()
	var x *x509.Certificate
	if err == nil {
		x, err = (&sidx509.PEMEncodedCertificate{Crt: crt}).GetCert()
	}
	if err != nil {
		c.Err = err.Error()
	} else {
		c.NotAfter = x.NotAfter
	}
	return c
}

// ClientCert is the client certificate of the current context of a
// client config: the kubeconfig's or the talosconfig's (output names it).
func ClientCert(output, text string) (*x509.Certificate, error) {
	get := kubeClientCert
	if output == "talosconfig" {
		get = talosClientCert
	}
	crt, err := get(text)
	if err != nil {
		return nil, err
	}
	return (&sidx509.PEMEncodedCertificate{Crt: crt}).GetCert()
}

// talosClientCert is the client certificate of a talosconfig's current context.
func talosClientCert(text string) ([]byte, error) {
	ctx, _, err := talosContext(text)
	if err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(ctx.Crt)
}

func talosContext(text string) (*clientconfig.Context, *clientconfig.Config, error) {
	if text == "" {
		return nil, nil, errors.New("the stack has no talosconfig output yet")
	}
	cfg, err := clientconfig.FromString(text)
	if err != nil {
		return nil, nil, fmt.Errorf("talosconfig: %w", err)
	}
	ctx, ok := cfg.Contexts[cfg.Context]
	if !ok {
		return nil, nil, fmt.Errorf("talosconfig: no context %q", cfg.Context)
	}
	return ctx, cfg, nil
}

// kubeClientCert is the client certificate of a kubeconfig's current context.
func kubeClientCert(text string) ([]byte, error) {
	if text == "" {
		return nil, errors.New("the stack has no kubeconfig output yet")
	}
	cfg, err := clientcmd.Load([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || cfg.AuthInfos[ctx.AuthInfo] == nil {
		return nil, fmt.Errorf("kubeconfig: no user for context %q", cfg.CurrentContext)
	}
	return cfg.AuthInfos[ctx.AuthInfo].ClientCertificateData, nil
}

// RenewTalosconfig returns the talosconfig with a new client certificate
// for its current context, issued now from the bundle's Talos API CA with
// the os:admin role: what machinery's GenerateTalosAPIClientCertificate,
// the call `talosctl gen config` and the provider make (machinery
// config/generate/talosconfig.go), does, for the default year, but at the
// time of the renewal rather than the bundle's clock.
func RenewTalosconfig(text string, bundle *secrets.Bundle) (string, error) {
	ctx, cfg, err := talosContext(text)
	if err != nil {
		return "", err
	}
	pair, err := secrets.NewAdminCertificateAndKey(time.Now(), bundle.Certs.OS, role.MakeSet(role.Admin), constants.TalosAPIDefaultCertificateValidityDuration)
	if err != nil {
		return "", fmt.Errorf("talosconfig: issue a client certificate: %w", err)
	}
	ctx.Crt = base64.StdEncoding.EncodeToString(pair.Crt)
	ctx.Key = base64.StdEncoding.EncodeToString(pair.Key)
	b, err := cfg.Bytes()
	return string(b), err
}

// RenewKubeconfig returns the admin kubeconfig anew, for the same cluster
// and server as text, with a client certificate issued from the bundle's
// Kubernetes CA: Talos' own kubeconfig.Generate with the inputs machined's
// GenerateAdmin passes for the Kubeconfig API the provider reads (common
// name admin, organisation system:masters, the default year).
func RenewKubeconfig(text string, bundle *secrets.Bundle) (string, error) {
	cfg, err := clientcmd.Load([]byte(text))
	if err != nil {
		return "", fmt.Errorf("kubeconfig: %w", err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || cfg.Clusters[ctx.Cluster] == nil {
		return "", fmt.Errorf("kubeconfig: no cluster for context %q", cfg.CurrentContext)
	}
	var out bytes.Buffer
	err = kubeconfig.Generate(&kubeconfig.GenerateInput{
		ClusterName:         ctx.Cluster,
		IssuingCA:           bundle.Certs.K8s,
		AcceptedCAs:         []*sidx509.PEMEncodedCertificate{{Crt: bundle.Certs.K8s.Crt}},
		CertificateLifetime: constants.KubernetesAdminCertDefaultLifetime,
		CommonName:          constants.KubernetesAdminCertCommonName,
		Organization:        constants.KubernetesAdminCertOrganization,
		Endpoint:            cfg.Clusters[ctx.Cluster].Server,
		Username:            "admin",
		ContextName:         "admin",
	}, &out)
	if err != nil {
		return "", fmt.Errorf("kubeconfig: issue a client certificate: %w", err)
	}
	return out.String(), nil
}
