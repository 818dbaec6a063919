package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	sidx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/kubeconfig"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
)

const day = 24 * time.Hour

// clientConfigs are a cluster's bundle, made 340 days ago, its talosconfig
// as machinery's generator made it then (a one-year certificate: 25 days
// left) and an admin kubeconfig whose certificate has lifetime left, made
// by Talos' own kubeconfig generator.
func clientConfigs(t *testing.T, left time.Duration) (*secrets.Bundle, string, string) {
	t.Helper()
	made := time.Now().Add(-340 * day)
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(made), config.TalosVersion1_9)
	require.NoError(t, err)
	in, err := generate.NewInput("milner-dev", "https://10.0.0.10:6443", "v1.32.3", generate.WithSecretsBundle(bundle),
		generate.WithEndpointList([]string{"10.0.0.11"}))
	require.NoError(t, err)
	tc, err := in.Talosconfig()
	require.NoError(t, err)
	talos, err := tc.Bytes()
	require.NoError(t, err)
	var kube bytes.Buffer
	require.NoError(t, kubeconfig.Generate(&kubeconfig.GenerateInput{
		ClusterName: "milner-dev", IssuingCA: bundle.Certs.K8s,
		AcceptedCAs:         []*sidx509.PEMEncodedCertificate{{Crt: bundle.Certs.K8s.Crt}},
		CertificateLifetime: left, CommonName: "admin", Organization: "system:masters",
		Endpoint: "https://10.0.0.10:6443", Username: "admin", ContextName: "admin",
	}, &kube))
	return bundle, string(talos), kube.String()
}

func TestStatusWarnsWithin30Days(t *testing.T) {
	bundle, talos, kube := clientConfigs(t, 20*day)
	now := time.Now()
	got := map[string]Cert{}
	for _, c := range Lifetimes(talos, kube, bundle, nil) {
		require.Empty(t, c.Err, c.Name)
		got[c.Name] = c
	}
	require.Len(t, got, 6)
	assert.Contains(t, got["talosconfig client"].Line(now), "(in 24 days): WARNING, renew it: milner talosconfig --renew")
	assert.Contains(t, got["kubeconfig client"].Line(now), "(in 19 days): WARNING, renew it: milner kubeconfig --renew")
	for _, ca := range []string{"Talos API CA", "Kubernetes CA", "Kubernetes aggregator CA", "etcd CA"} {
		assert.False(t, got[ca].Warn(now), ca)
		assert.NotContains(t, got[ca].Line(now), "WARNING", ca)
	}
	assert.Contains(t, got["kubeconfig client"].Line(now.Add(30*day)), "EXPIRED")

	_, _, kube = clientConfigs(t, 40*day)
	for _, c := range Lifetimes(talos, kube, bundle, nil) {
		if c.Name == "kubeconfig client" {
			assert.False(t, c.Warn(now), c.Line(now))
		}
	}
	missing := Lifetimes("", "", nil, nil)
	assert.Equal(t, "the stack has no talosconfig output yet", missing[0].Err)
	assert.Equal(t, "no secrets bundle in the state", missing[2].Err)
}

// verify checks that pem is a client certificate the bundle's CA signed
// and returns it.
func verify(t *testing.T, pem []byte, ca []byte) *x509.Certificate {
	t.Helper()
	crt, err := (&sidx509.PEMEncodedCertificate{Crt: pem}).GetCert()
	require.NoError(t, err)
	caCrt, err := (&sidx509.PEMEncodedCertificate{Crt: ca}).GetCert()
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(caCrt)
	_, err = crt.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(365*day), crt.NotAfter, time.Minute)
	return crt
}

func TestRenewIssuesClientCertificatesFromTheBundle(t *testing.T) {
	bundle, talos, kube := clientConfigs(t, 20*day)

	renewed, err := RenewTalosconfig(talos, bundle)
	require.NoError(t, err)
	tc, err := clientconfig.FromString(renewed)
	require.NoError(t, err)
	old, err := clientconfig.FromString(talos)
	require.NoError(t, err)
	ctx := tc.Contexts[tc.Context]
	assert.Equal(t, old.Context, tc.Context)
	assert.Equal(t, old.Contexts[old.Context].Endpoints, ctx.Endpoints)
	assert.Equal(t, old.Contexts[old.Context].CA, ctx.CA)
	crt, err := base64.StdEncoding.DecodeString(ctx.Crt)
	require.NoError(t, err)
	// apid authorises by the certificate's organisation (the role).
	assert.Equal(t, []string{"os:admin"}, verify(t, crt, bundle.Certs.OS.Crt).Subject.Organization)

	renewed, err = RenewKubeconfig(kube, bundle)
	require.NoError(t, err)
	kc, err := clientcmd.Load([]byte(renewed))
	require.NoError(t, err)
	assert.Equal(t, "admin@milner-dev", kc.CurrentContext)
	assert.Equal(t, "https://10.0.0.10:6443", kc.Clusters["milner-dev"].Server)
	kcrt := verify(t, kc.AuthInfos["admin@milner-dev"].ClientCertificateData, bundle.Certs.K8s.Crt)
	assert.Equal(t, "admin", kcrt.Subject.CommonName)
	assert.Equal(t, []string{"system:masters"}, kcrt.Subject.Organization)

	kubeClient := Lifetimes("", renewed, bundle, nil)[1]
	assert.False(t, kubeClient.Warn(time.Now()), kubeClient.Line(time.Now()))
	_, err = RenewKubeconfig(strings.ReplaceAll(kube, "current-context: admin@milner-dev", "current-context: other"), bundle)
	assert.ErrorContains(t, err, `no cluster for context "other"`)
}
