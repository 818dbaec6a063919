// Package oidclogin writes the kubeconfig people use on a stack with
// milner:cluster.oidc: the cluster of the stack's admin kubeconfig, and a
// user whose ID token comes from int128/kubelogin as a client-go exec
// credential plugin. `milner kubeconfig` writes it; tests/kubeapi runs it
// through client-go against a real kube-apiserver.
package oidclogin

import (
	"encoding/base64"
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/milner/milner/stacks/config"
)

// Runbook is the runbook of the OIDC and break-glass paths.
const Runbook = "docs/runbooks/oidc.md"

// Kubeconfig turns the stack's admin kubeconfig (the Talos output) into
// the people's one for a stack with milner:cluster.oidc: the same cluster
// (server, CA), and a user that gets its ID token from int128/kubelogin as
// a client-go exec credential plugin (`kubectl oidc-login get-token`, the
// form of kubelogin's README). The admin's certificate and key are dropped:
// the file holds no credential, kubelogin keeps its tokens in its own cache.
func Kubeconfig(admin string, o *config.OIDCConfig) (string, error) {
	from, err := clientcmd.Load([]byte(admin))
	if err != nil {
		return "", fmt.Errorf("kubeconfig output: %w", err)
	}
	cur, ok := from.Contexts[from.CurrentContext]
	if !ok || from.Clusters[cur.Cluster] == nil {
		return "", fmt.Errorf("kubeconfig output: no current context with a cluster")
	}
	name := "oidc@" + cur.Cluster
	out := clientcmdapi.NewConfig()
	out.Clusters[cur.Cluster] = from.Clusters[cur.Cluster]
	out.AuthInfos[name] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion:      "client.authentication.k8s.io/v1",
		Command:         "kubectl",
		Args:            KubeloginArgs(o),
		InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
		InstallHint: "milner's OIDC context needs kubelogin as a kubectl plugin: " +
			"scripts/tools.sh kubelogin (the pinned kubelogin, as kubectl-oidc_login in .tools/bin, which must be on PATH) or kubectl krew install oidc-login; break-glass: milner kubeconfig --admin (" + Runbook + ")",
	}}
	out.Contexts[name] = &clientcmdapi.Context{Cluster: cur.Cluster, AuthInfo: name}
	out.CurrentContext = name
	b, err := clientcmd.Write(*out)
	return string(b), err
}

// KubeloginArgs are kubelogin's get-token arguments: the issuer, the
// client, the scopes the claims need beyond openid, and the issuer's CA
// when it has a private one (kubelogin's --certificate-authority-data).
func KubeloginArgs(o *config.OIDCConfig) []string {
	args := []string{"oidc-login", "get-token", "--oidc-issuer-url=" + o.IssuerURL, "--oidc-client-id=" + o.ClientID}
	for _, s := range o.OIDCScopes() {
		args = append(args, "--oidc-extra-scope="+s)
	}
	if o.IssuerCA != "" {
		args = append(args, "--certificate-authority-data="+base64.StdEncoding.EncodeToString([]byte(o.IssuerCA)))
	}
	return args
}
