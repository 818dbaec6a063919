package main

import (
	"fmt"
	"github.com/milner/milner/internal/clientfiles"
	"github.com/milner/milner/internal/pipeline"
	"os"

	"github.com/milner/milner/internal/oidclogin"
	"github.com/spf13/cobra"
)

func clientCmd(c clientfiles.Config) *cobra.Command {
	f := &stackFlags{}
	var file string
	var stdout, renew, admin bool
	cmd := &cobra.Command{
		Use:   c.Output,
		Short: fmt.Sprintf("Merge the stack's %s into the user's %s config (or print it)", c.Output, c.Tool),
		Long: fmt.Sprintf(`%s reads the stack's %s output (secret) and merges it into the
user's %s config: --file, else $%s, else ~/%s. Entries of the same name
are replaced, the cluster's context becomes the current one, the file is
written 0600, and a symlink is refused. 'milner teardown' takes the
cluster's entries out again. --renew first issues a new client certificate
from the stack's secrets bundle (no apply; 'milner status' shows expiry).`, c.Output, c.Output, c.Tool, c.Env, c.Home),
		Example: fmt.Sprintf("  milner %s --stack dev\n  milner %s --stack dev --stdout > /tmp/%s", c.Output, c.Output, c.Output),
		RunE: f.run(false, func(o *pipeline.Op) error {
			st := o.St
			outs, err := o.Outputs()
			if err != nil {
				return err
			}
			raw, ok := outs[c.Output].(string)
			if !ok {
				return fmt.Errorf("stack %q has no %s output yet: run `milner up --stack %s` through the Talos layer first", st.Name(), c.Output, st.Name())
			}
			// A renewal issues a certificate now: no apply, the state keeps the old one.
			if renew {
				bundle, err := stackBundle(o)
				if err != nil {
					return fmt.Errorf("renew the %s client certificate: %w", c.Output, err)
				}
				if raw, err = c.Renew(raw, bundle); err != nil {
					return err
				}
			}
			if c.Output == clientfiles.Kube.Output {
				if raw, err = peopleOrAdmin(o, raw, admin, renew); err != nil {
					return err
				}
			}
			if stdout {
				_, err := fmt.Print(raw)
				return err
			}
			path, err := c.MergeInto(raw, file)
			if err != nil {
				return fmt.Errorf("stack %q: %w", st.Name(), err)
			}
			fmt.Printf("milner %s: merged stack %q into %s\n", c.Output, st.Name(), path)
			return nil
		}),
	}
	f.addStack(cmd, false)
	cmd.Flags().StringVar(&file, "file", "", fmt.Sprintf("the %s config to merge into (default $%s or ~/%s)", c.Tool, c.Env, c.Home))
	cmd.Flags().BoolVar(&stdout, "stdout", false, "print the config instead of merging it")
	if c.Output == clientfiles.Kube.Output {
		cmd.Long += `
For a stack with milner:cluster.oidc, kubeconfig writes a context that
logs in through the OIDC provider (kubelogin, 'kubectl oidc-login'), and
--admin the break-glass admin certificate instead.`
		cmd.Flags().BoolVar(&admin, "admin", false, "write the break-glass admin certificate context (system:masters) even when the stack authenticates people through OIDC ("+oidclogin.Runbook+")")
	}
	cmd.Flags().BoolVar(&renew, "renew", false, "issue a new client certificate (one year) from the stack's secrets bundle first; no apply")
	return cmd
}

// peopleOrAdmin is the kubeconfig to write: for a stack with
// milner:cluster.oidc the OIDC context unless --admin; the admin
// certificate's, said so on stderr, with --admin.
func peopleOrAdmin(o *pipeline.Op, raw string, admin, renew bool) (string, error) {
	cfg, err := o.Config()
	if err != nil {
		return "", err
	}
	oidc := cfg.Cluster.OIDC
	switch {
	case admin:
		fmt.Fprintf(os.Stderr, "milner kubeconfig: writing the break-glass admin certificate context (system:masters, no revocation); use it only as %s says\n", oidclogin.Runbook)
		return raw, nil
	case oidc == nil:
		return raw, nil
	case renew:
		return "", fmt.Errorf("--renew issues the admin certificate, which the OIDC context does not hold: give --admin too")
	default:
		return oidclogin.Kubeconfig(raw, oidc)
	}
}
