//go:build integration

package kubeapi

import (
	"archive/tar"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.yaml.in/yaml/v3"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/testpki"
)

// chartsDir is the static Helm repository of the unmodified upstream charts:
// $MILNER_CHARTS_DIR, else ../shared/charts beside the repository.
func chartsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MILNER_CHARTS_DIR")
	if dir == "" {
		dir = filepath.Join(repo, "..", "shared", "charts")
	}
	if _, err := os.Stat(filepath.Join(dir, "index.yaml")); err != nil {
		t.Fatalf("the upstream charts: %v (set MILNER_CHARTS_DIR to a chart repository directory)", err)
	}
	return dir
}

// Helm's OCI media types (helm.sh/helm/v3 pkg/registry/constants.go:
// ConfigMediaType, ChartLayerMediaType), what its Pull accepts.
const (
	helmConfigMediaType = "application/vnd.cncf.helm.config.v1+json"
	helmChartMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// chartMirror is a site's chart mirror on loopback, as milner:chartMirrors
// points at it: the directory served as a Helm chart repository over plain
// HTTP (what the https:// sources are mirrored to), and an in-process OCI
// registry (go-containerregistry pkg/registry) over TLS holding the same
// archives under the published oci:// paths (below /ghcr for
// oci://ghcr.io).
//
// The registry is TLS, not plain HTTP, because the Kubernetes provider
// cannot pull from a plain-HTTP registry: its Release builds Helm's
// registry client with ClientOptDebug and ClientOptCredentialsFile only
// (pulumi-kubernetes provider/v4 pkg/provider/helm_release.go, near
// "Setting registry client"), never ClientOptPlainHTTP, and the Release
// resource has no plainHttp input; Helm v3.18.6's client then sets
// PlainHTTP false on every oras repository (pkg/registry/client.go), so it
// speaks https. Its HTTP client has no TLS config of its own, so Go's
// system roots apply, which SSL_CERT_FILE names (crypto/x509
// root_unix.go): the test CA is handed to the provider that way.
type chartMirror struct {
	// Repo is the HTTP chart repository's URL.
	Repo string
	// Registry is the OCI registry's host:port.
	Registry string
	// Mirrors is milner:chartMirrors for the published sources.
	Mirrors map[string]string
}

// startChartMirror serves dir and pushes every archive of its index to the
// registry under the published OCI path of its chart, and points
// SSL_CERT_FILE (for this test, so for the engine and the provider it
// starts) at the registry's CA.
func startChartMirror(t *testing.T, dir string) *chartMirror {
	t.Helper()
	repoSrv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(repoSrv.Close)

	pki := testpki.Valid("127.0.0.1", "localhost")
	cert, err := tls.X509KeyPair([]byte(pki.Cert), []byte(pki.Key))
	if err != nil {
		t.Fatal(err)
	}
	regSrv := httptest.NewUnstartedServer(registry.New(registry.Logger(nopLogger())))
	regSrv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	regSrv.StartTLS()
	t.Cleanup(regSrv.Close)
	caFile := filepath.Join(t.TempDir(), "mirror-ca.crt")
	if err := os.WriteFile(caFile, []byte(pki.CA), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", caFile)

	m := &chartMirror{Repo: repoSrv.URL, Registry: strings.TrimPrefix(regSrv.URL, "https://")}
	m.Mirrors = map[string]string{"oci://ghcr.io": "oci://" + m.Registry + "/ghcr"}
	for _, p := range config.PublishedCharts {
		if !strings.HasPrefix(p.Repo, "oci://") {
			m.Mirrors[p.Repo] = m.Repo
		}
	}

	// The pushes trust the registry's CA the same way.
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: poolOf(t, pki.CA), MinVersion: tls.VersionTLS12}}
	var index struct {
		Entries map[string][]struct {
			Version string   `yaml:"version"`
			URLs    []string `yaml:"urls"`
		} `yaml:"entries"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(dir, "index.yaml")), &index); err != nil {
		t.Fatal(err)
	}
	for _, p := range config.PublishedCharts {
		if !strings.HasPrefix(p.Repo, "oci://") {
			continue
		}
		for _, e := range index.Entries[p.Name] {
			archive := readFile(t, filepath.Join(dir, e.URLs[0]))
			path := strings.TrimPrefix(config.ChartMirrors(m.Mirrors).Fetch(p.Repo), "oci://")
			ref := fmt.Sprintf("%s/%s:%s", path, p.Name, e.Version)
			pushChart(t, ref, p.Name, e.Version, archive, transport)
		}
	}
	return m
}

// pushChart pushes a chart archive as Helm's push does: a manifest whose
// config is the chart's metadata and whose one layer is the archive.
func pushChart(t *testing.T, ref, chart, version string, archive []byte, transport http.RoundTripper) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	meta := chartMetadata(t, archive, chart)
	if meta["version"] != version {
		t.Fatalf("%s: Chart.yaml version %v, index %s", ref, meta["version"], version)
	}
	config, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	opts := []remote.Option{remote.WithTransport(transport)}
	var descs []map[string]any
	for _, blob := range []struct {
		data []byte
		mt   string
	}{{config, helmConfigMediaType}, {archive, helmChartMediaType}} {
		l := static.NewLayer(blob.data, types.MediaType(blob.mt))
		if err := remote.WriteLayer(r.Context(), l, opts...); err != nil {
			t.Fatalf("push %s: %v", ref, err)
		}
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		descs = append(descs, map[string]any{"mediaType": blob.mt, "digest": d.String(), "size": len(blob.data)})
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": string(types.OCIManifestSchema1),
		"config": descs[0], "layers": descs[1:],
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(r, rawManifest(manifest), opts...); err != nil {
		t.Fatalf("push %s: manifest: %v", ref, err)
	}
}

// rawManifest is an OCI image manifest as bytes, for remote.Put.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error) { return m, nil }

func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// chartMetadata reads <chart>/Chart.yaml from a chart archive.
func chartMetadata(t *testing.T, archive []byte, chart string) map[string]any {
	t.Helper()
	gz, err := gzip.NewReader(strings.NewReader(string(archive)))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s: no Chart.yaml in the archive", chart)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != chart+"/Chart.yaml" {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		meta := map[string]any{}
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		return meta
	}
}

// poolOf is a certificate pool of one PEM CA.
func poolOf(t *testing.T, caPEM string) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatal("mirror CA: no certificate")
	}
	return pool
}

// nopLogger drops the registry's request log.
func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }
