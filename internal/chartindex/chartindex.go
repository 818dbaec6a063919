// Package chartindex asks where a chart is published which versions it
// publishes there: a chart repository's index.yaml (Helm's repo index, the
// file `helm repo index` writes and `helm install --repo` reads), or an
// OCI registry's tags for the chart (Helm pushes a chart version as a tag,
// with "+" written "_": helm.sh/helm/v3 pkg/registry, the tag of a push).
package chartindex

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.yaml.in/yaml/v3"
)

// maxIndex bounds the index.yaml read (the Bitnami index, among the
// largest, is about 20 MiB).
const maxIndex = 64 << 20

// Versions returns the versions of chart name that source publishes:
// source is an http(s):// chart repository or an oci:// registry path, as
// milner:apps[].chart.repo (or its mirror) names it.
func Versions(ctx context.Context, client *http.Client, source, chart string) ([]string, error) {
	if path, ok := strings.CutPrefix(source, "oci://"); ok {
		return ociTags(ctx, client, path+"/"+chart)
	}
	return indexVersions(ctx, client, source, chart)
}

// indexVersions reads the repository's index.yaml.
func indexVersions(ctx context.Context, client *http.Client, repo, chart string) ([]string, error) {
	url := strings.TrimSuffix(repo, "/") + "/index.yaml"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxIndex))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	var index struct {
		Entries map[string][]struct {
			Version string `yaml:"version"`
		} `yaml:"entries"`
	}
	if err := yaml.Unmarshal(b, &index); err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	var out []string
	for _, e := range index.Entries[chart] {
		out = append(out, e.Version)
	}
	return out, nil
}

// ociTags lists the repository's tags, anonymously (a public registry such
// as ghcr.io hands an anonymous pull token; go-containerregistry asks for
// it), as chart versions.
func ociTags(ctx context.Context, client *http.Client, repo string) ([]string, error) {
	r, err := name.NewRepository(repo)
	if err != nil {
		return nil, err
	}
	transport := client.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	tags, err := remote.List(r, remote.WithContext(ctx), remote.WithAuth(authn.Anonymous), remote.WithTransport(transport))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		out = append(out, strings.ReplaceAll(t, "_", "+"))
	}
	return out, nil
}

// Published reports whether source publishes version of chart; known
// lists what it does publish (for the refusal).
func Published(ctx context.Context, client *http.Client, source, chart, version string) (ok bool, known []string, err error) {
	known, err = Versions(ctx, client, source, chart)
	if err != nil {
		return false, nil, err
	}
	return slices.Contains(known, version), known, nil
}
