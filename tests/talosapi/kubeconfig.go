package talosapi

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"time"

	"github.com/siderolabs/talos/pkg/kubeconfig"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
)

// kubeconfigTarGz is machined's Kubeconfig answer (talos v1.9.5
// v1alpha1_server.go, Server.Kubeconfig): Talos' own
// kubeconfig.GenerateAdmin of the running config's cluster (context
// admin@<cluster> current, server cluster.controlPlane.endpoint, the
// cluster CA, a client certificate issued from it for
// cluster.adminKubeconfig), as one file "kubeconfig" in a tar in a gzip
// stream "to match Copy protocol". As there, the tar writer is never
// closed: the archive ends after the file's bytes, without padding or
// end-of-archive blocks, which machinery's client reads. A ttl above zero
// replaces the certificate's lifetime.
func kubeconfigTarGz(cluster config.ClusterConfig, ttl time.Duration) ([]byte, error) {
	var in kubeconfig.GenerateAdminInput = cluster
	if ttl > 0 {
		in = withTTL{ClusterConfig: cluster, ttl: ttl}
	}
	var b bytes.Buffer
	if err := kubeconfig.GenerateAdmin(in, &b); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: "kubeconfig", Size: int64(b.Len()), ModTime: time.Now(), Mode: 0o600,
	}); err != nil {
		return nil, err
	}
	if _, err := io.Copy(tw, &b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// withTTL is a cluster config whose admin kubeconfig has another
// certificate lifetime.
type withTTL struct {
	config.ClusterConfig
	ttl time.Duration
}

func (w withTTL) AdminKubeconfig() config.AdminKubeconfig {
	return adminTTL{AdminKubeconfig: w.ClusterConfig.AdminKubeconfig(), ttl: w.ttl}
}

type adminTTL struct {
	config.AdminKubeconfig
	ttl time.Duration
}

func (a adminTTL) CertLifetime() time.Duration { return a.ttl }
