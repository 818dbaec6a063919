//go:build integration

package kubeapi

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/milner/milner/internal/certs"
)

// A kubeconfig renewed from a secrets bundle (certs.RenewKubeconfig) is the
// cluster admin to a real kube-apiserver that trusts the bundle's
// Kubernetes CA for clients, as Talos' kube-apiserver does: authenticated
// as admin in system:masters, which RBAC grants everything.
//
// Certificate lifetimes and renewal (`internal/certs`, `milner status`,
// `milner talosconfig|kubeconfig --renew`): unit tests with machinery's own
// secrets bundle and generators (the talosconfig as `gen config` makes it,
// the kubeconfig with talos `pkg/kubeconfig.Generate`): expiries read, the
// 30-day warning, renewed certificates that chain to the bundle's Talos API
// and Kubernetes CAs with the roles apid and kube-apiserver authorise
// (`os:admin`; `admin`/`system:masters`). The renewed admin kubeconfig is
// accepted by a real kube-apiserver that trusts the bundle's Kubernetes CA
// for clients, as Talos' does (`tests/kubeapi` TestRenewedKubeconfigOnRealAPI:
// a SelfSubjectReview answers admin in system:masters). The renewed
// talosconfig against a real apid needs a real Talos node.
func TestRenewedKubeconfigOnRealAPI(t *testing.T) {
	api := startAPIServer(t)
	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersion1_9)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := certs.RenewKubeconfig(api.Kubeconfig, bundle)
	if err != nil {
		t.Fatal(err)
	}
	// The API server trusts the bundle's CA for clients too: it reloads
	// --client-ca-file when the file changes (dynamic CA content).
	ca := readFile(t, api.pki.caCert)
	if err := os.WriteFile(api.pki.caCert, append(ca, bundle.Certs.K8s.Crt...), 0o600); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load([]byte(renewed))
	if err != nil {
		t.Fatal(err)
	}
	if got := kc.Clusters["kubeapi-test"]; got == nil || got.Server != api.URL {
		t.Fatalf("renewed kubeconfig: want the cluster kubeapi-test at %s, got %+v", api.URL, kc.Clusters)
	}
	// The server's certificate is the harness's, not one the bundle signed.
	kc.Clusters["kubeapi-test"].CertificateAuthorityData = ca
	rc, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	var review *authv1.SelfSubjectReview
	deadline := time.Now().Add(90 * time.Second)
	for {
		review, err = client.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("the renewed admin certificate: %v", err)
	}
	u := review.Status.UserInfo
	if u.Username != "admin" || !slices.Contains(u.Groups, "system:masters") {
		t.Fatalf("the renewed admin certificate authenticates as %q %v, want admin in system:masters", u.Username, u.Groups)
	}
	if _, err := client.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("the renewed admin lists namespaces: %v", err)
	}
	t.Logf("renewed admin certificate: %s %v", u.Username, u.Groups)
}
