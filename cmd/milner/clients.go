package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/clientfiles"
	"github.com/milner/milner/internal/oidclogin"
	"github.com/milner/milner/internal/pipeline"
)

// merged is kubeconfig's and talosconfig's result (--json): the file the
// stack's config was merged into.
type merged struct {
	Stack string `json:"stack"`
	File  string `json:"file"`
}

func clientCmd(c clientfiles.Config) *cobra.Command {
	f := &stackFlags{}
	var file string
	var stdout, renew, admin bool
	cmd := &cobra.Command{
		Use:   c.Output,
		Short: fmt.Sprintf("Merge the stack's %s into the user's %s config (or print it)", c.Output, c.Tool),
		Long: fmt.Sprintf(`%s reads the stack's %s output (secret) and merges it into the
user's %s config: --file, else $%s, else ~/%s. Entries of the same name
are replaced, the cluster's context becomes the current one (said loudly
on stderr when it is the admin certificate's, system:masters), the file is
written 0600, and a symlink is refused. 'milner teardown' takes the
cluster's entries out again. --renew first issues a new client certificate
from the stack's secrets bundle (no apply) and records it in the stack's
backend before writing it ('milner status' lists what was issued, and
every expiry).`, c.Output, c.Output, c.Tool, c.Env, c.Home),
		Example: fmt.Sprintf("  milner %s --stack dev\n  milner %s --stack dev --stdout > /tmp/%s", c.Output, c.Output, c.Output),
		RunE: f.run(false, func(o *pipeline.Op) error {
			raw, err := pipeline.ClientConfig(o, c, renew, admin)
			if err != nil {
				return err
			}
			if stdout {
				_, err := fmt.Print(raw)
				return err
			}
			if err := pipeline.MergeClientConfig(o, c, raw, file, admin, o.Out, os.Stderr); err != nil {
				return err
			}
			path, err := c.Path(file)
			return emit(f.json, merged{Stack: o.St.Name(), File: path}, nil, err)
		}),
	}
	f.addStack(cmd, false)
	cmd.Flags().StringVar(&file, "file", "", fmt.Sprintf("the %s config to merge into (default $%s or ~/%s)", c.Tool, c.Env, c.Home))
	cmd.Flags().BoolVar(&stdout, "stdout", false, "print the config instead of merging it")
	cmd.MarkFlagsMutuallyExclusive("stdout", "json") // the config is the output
	if c.Output == clientfiles.Kube.Output {
		cmd.Long += `
For a stack with milner:cluster.oidc, kubeconfig writes a context that
logs in through the OIDC provider (kubelogin, 'kubectl oidc-login'), and
--admin the break-glass admin certificate instead, keeping the current
context (name it: kubectl --context admin@<cluster>).`
		cmd.Flags().BoolVar(&admin, "admin", false, "write the break-glass admin certificate context (system:masters) even when the stack authenticates people through OIDC ("+oidclogin.Runbook+")")
	}
	cmd.Flags().BoolVar(&renew, "renew", false, "issue a new client certificate (one year) from the stack's secrets bundle first; no apply")
	return cmd
}
