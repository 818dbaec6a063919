package pipeline

import (
	"fmt"
	"io"
	"os"

	"github.com/milner/milner/internal/clientfiles"
	"github.com/milner/milner/internal/oidclogin"
)

// ClientConfig is `milner kubeconfig|talosconfig`'s config: the stack's c
// output; with renew, with a client certificate issued now from the
// secrets bundle in state (no apply: the state keeps the old one); for the
// kubeconfig of a stack with milner:cluster.oidc, the OIDC context unless
// admin.
func ClientConfig(o *Op, c clientfiles.Config, renew, admin bool) (string, error) {
	outs, err := o.Outputs()
	if err != nil {
		return "", err
	}
	raw, ok := outs[c.Output].(string)
	if !ok {
		return "", fmt.Errorf("stack %q has no %s output yet: run `milner up --stack %s` through the Talos layer first", o.St.Name(), c.Output, o.St.Name())
	}
	if renew {
		bundle, err := o.Bundle()
		if err != nil {
			return "", fmt.Errorf("renew the %s client certificate: %w", c.Output, err)
		}
		if raw, err = c.Renew(raw, bundle); err != nil {
			return "", err
		}
	}
	if c.Output != clientfiles.Kube.Output {
		return raw, nil
	}
	return peopleOrAdmin(o, raw, admin, renew, os.Stderr)
}

// peopleOrAdmin is the kubeconfig to write: for a stack with
// milner:cluster.oidc the OIDC context unless --admin; the admin
// certificate's, said so on stderr (naming the runbook), with --admin.
func peopleOrAdmin(o *Op, raw string, admin, renew bool, stderr io.Writer) (string, error) {
	cfg, err := o.Config()
	if err != nil {
		return "", err
	}
	oidc := cfg.Cluster.OIDC
	switch {
	case admin:
		_, _ = fmt.Fprintf(stderr, "milner kubeconfig: writing the break-glass admin certificate context (system:masters, no revocation); use it only as %s says\n", oidclogin.Runbook)
		return raw, nil
	case oidc == nil:
		return raw, nil
	case renew:
		return "", fmt.Errorf("--renew issues the admin certificate, which the OIDC context does not hold: give --admin too")
	default:
		return oidclogin.Kubeconfig(raw, oidc)
	}
}
