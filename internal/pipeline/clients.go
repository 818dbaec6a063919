package pipeline

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/milner/milner/internal/certs"
	"github.com/milner/milner/internal/engine"

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
		if err := recordRenewal(o, c, raw); err != nil {
			return "", fmt.Errorf("%w: the new certificate was not written anywhere", err)
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

// recordRenewal records the client certificate --renew issued in the
// stack's backend (engine.Stack.RecordIssued) before it is handed out, and
// says so on stderr: a year's credential of the cluster, which no apply
// and no state records otherwise.
func recordRenewal(o *Op, c clientfiles.Config, raw string) error {
	crt, err := certs.ClientCert(c.Output, raw)
	if err != nil {
		return err
	}
	rec := engine.Issued{Config: c.Output, Subject: crt.Subject.CommonName, Groups: crt.Subject.Organization,
		Serial: crt.SerialNumber.Text(16), NotAfter: crt.NotAfter}
	if err := o.St.RecordIssued(o.Ctx, rec); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(os.Stderr, "milner %s: issued a client certificate (CN %s, groups %s, serial %s, expires %s), recorded in the stack's backend: `milner status --stack %s` lists it\n",
		c.Output, rec.Subject, strings.Join(rec.Groups, ","), rec.Serial, rec.NotAfter.UTC().Format(time.DateOnly), o.St.Name())
	return nil
}

// MergeClientConfig merges raw, the stack's client config of kind c, into
// the user's file (file, else c's default) and says what became current.
// --admin (admin) keeps the user's current context: the break-glass
// context is there to be named (kubectl --context), never silently the
// one every kubectl uses. Any merge that makes the admin certificate's
// context (system:masters: --admin, or the kubeconfig of a stack without
// OIDC) current says so loudly on stderr, with the way back.
func MergeClientConfig(o *Op, c clientfiles.Config, raw, file string, admin bool, stdout, stderr io.Writer) error {
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	masters := c.Output == clientfiles.Kube.Output && (admin || cfg.Cluster.OIDC == nil)
	return mergeClientConfig(c, o.St.Name(), raw, file, admin, masters, stdout, stderr)
}

// mergeClientConfig is MergeClientConfig once the stack is known: masters
// says raw's context is the admin certificate's (system:masters).
func mergeClientConfig(c clientfiles.Config, stack, raw, file string, admin, masters bool, stdout, stderr io.Writer) error {
	path, ctxs, err := c.MergeInto(raw, file, admin)
	if err != nil {
		return fmt.Errorf("stack %q: %w", stack, err)
	}
	_, _ = fmt.Fprintf(stdout, "milner %s: merged stack %q into %s\n", c.Output, stack, path)
	switch {
	case !ctxs.Changed() && ctxs.After != ctxs.Merged:
		_, _ = fmt.Fprintf(stdout, "milner %s: the current context stays %q; use the stack's with --context %s\n", c.Output, ctxs.After, ctxs.Merged)
	case ctxs.Changed() && masters:
		was := fmt.Sprintf("was %q", ctxs.Before)
		if ctxs.Before == "" {
			was = "the file had none"
		}
		back := "there is no other to switch back to"
		if ctxs.Before != "" {
			back = fmt.Sprintf("switch back with `kubectl config use-context %s`", ctxs.Before)
		}
		_, _ = fmt.Fprintf(stderr, "milner %s: WARNING: the current context is now %q (%s): the cluster's admin certificate, system:masters, with no revocation; every kubectl without --context now acts as cluster admin; %s\n",
			c.Output, ctxs.After, was, back)
	case ctxs.Changed():
		_, _ = fmt.Fprintf(stdout, "milner %s: the current context is now %q (was %q)\n", c.Output, ctxs.After, ctxs.Before)
	}
	return nil
}
