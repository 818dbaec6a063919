package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/milner/milner/internal/certs"
	"github.com/milner/milner/internal/oidclogin"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// clientConfig is one kind of client config a stack outputs: the admin
// kubeconfig or the talosctl config.
type clientConfig struct {
	// output is the stack output holding it.
	output string
	// env names the variable that points to the user's file.
	env string
	// home is the default file, relative to the home directory.
	home string
	// merge puts the stack's config (the output's text) into the user's
	// file at path; remove takes a cluster's entries out of it. Both read
	// and write through the client's own library.
	merge  func(path, stack string) error
	remove func(path, cluster string) error
	// tool is the client that reads it, for the help text.
	tool string
	// renew issues the config's client certificate anew from the stack's
	// secrets bundle.
	renew func(config string, bundle *secrets.Bundle) (string, error)
}

var kubeconfig = clientConfig{
	output: "kubeconfig", env: "KUBECONFIG", home: ".kube/config", tool: "kubectl", renew: certs.RenewKubeconfig,
	merge: func(path, stack string) error {
		from, err := clientcmd.Load([]byte(stack))
		if err != nil {
			return fmt.Errorf("kubeconfig output: %w", err)
		}
		return modifyKubeconfig(path, func(user *clientcmdapi.Config) {
			maps.Copy(user.Clusters, from.Clusters)
			maps.Copy(user.AuthInfos, from.AuthInfos)
			maps.Copy(user.Contexts, from.Contexts)
			user.CurrentContext = from.CurrentContext
		})
	},
	remove: func(path, cluster string) error {
		return modifyKubeconfig(path, func(user *clientcmdapi.Config) {
			for name, c := range user.Contexts {
				if c.Cluster != cluster {
					continue
				}
				delete(user.AuthInfos, c.AuthInfo)
				delete(user.Contexts, name)
				if user.CurrentContext == name {
					user.CurrentContext = ""
				}
			}
			delete(user.Clusters, cluster)
		})
	},
}

// modifyKubeconfig edits the kubeconfig at path as kubectl does: client-go
// loads it and clientcmd.ModifyConfig writes the difference back under
// kubectl's lock file (<path>.lock), so a concurrent kubectl waits.
func modifyKubeconfig(path string, edit func(*clientcmdapi.Config)) error {
	access := clientcmd.NewDefaultPathOptions()
	access.LoadingRules.ExplicitPath = path
	user, err := access.GetStartingConfig()
	if err != nil {
		return err
	}
	edit(user)
	return clientcmd.ModifyConfig(access, *user, false)
}

var talosconfig = clientConfig{
	output: "talosconfig", env: "TALOSCONFIG", home: ".talos/config", tool: "talosctl", renew: certs.RenewTalosconfig,
	merge: func(path, stack string) error {
		from, err := clientconfig.FromString(stack)
		if err != nil {
			return fmt.Errorf("talosconfig output: %w", err)
		}
		return modifyTalosconfig(path, func(user *clientconfig.Config) {
			maps.Copy(user.Contexts, from.Contexts)
			user.Context = from.Context
		})
	},
	remove: func(path, cluster string) error {
		return modifyTalosconfig(path, func(user *clientconfig.Config) {
			delete(user.Contexts, cluster)
			if user.Context == cluster {
				user.Context = ""
			}
		})
	},
}

// modifyTalosconfig edits the talosconfig at path through Talos' own
// client config (machinery client/config), as talosctl reads it. Same
// context names are replaced, not renamed as talosctl config merge does:
// the stack's context is the cluster's.
func modifyTalosconfig(path string, edit func(*clientconfig.Config)) error {
	user, err := clientconfig.Open(path)
	if err != nil {
		return err
	}
	if user.Contexts == nil {
		user.Contexts = map[string]*clientconfig.Context{}
	}
	edit(user)
	return user.Save(path)
}

// path is the user's file: $env's first entry, or ~/home.
func (c clientConfig) path(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if v := os.Getenv(c.env); v != "" {
		return filepath.SplitList(v)[0], nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(h, c.home), nil
}

// privateFile prepares the user's file for credentials: a symlink is
// refused (milner does not write through it), an existing file is made
// 0600 before anything is written into it, a missing directory is made
// 0700. exists says whether the file was there.
func privateFile(path string) (exists bool, err error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, os.MkdirAll(filepath.Dir(path), 0o700)
	case err != nil:
		return false, err
	case fi.Mode()&os.ModeSymlink != 0:
		return false, fmt.Errorf("%s is a symlink; milner does not write through it (give --file)", path)
	}
	return true, os.Chmod(path, 0o600)
}

// mergeInto merges the stack's config into the user's file.
func (c clientConfig) mergeInto(stack, file string) (string, error) {
	path, err := c.path(file)
	if err != nil {
		return "", err
	}
	if _, err := privateFile(path); err != nil {
		return "", err
	}
	return path, c.merge(path, stack)
}

// removeFrom takes cluster's entries out of the user's file, if it exists.
func (c clientConfig) removeFrom(cluster, file string) error {
	path, err := c.path(file)
	if err != nil {
		return err
	}
	exists, err := privateFile(path)
	if err != nil || !exists {
		return err
	}
	return c.remove(path, cluster)
}

func clientCmd(c clientConfig) *cobra.Command {
	f := &stackFlags{}
	var file string
	var stdout, renew, admin bool
	cmd := &cobra.Command{
		Use:   c.output,
		Short: fmt.Sprintf("Merge the stack's %s into the user's %s config (or print it)", c.output, c.tool),
		Long: fmt.Sprintf(`%s reads the stack's %s output (secret) and merges it into the
user's %s config: --file, else $%s, else ~/%s. Entries of the same name
are replaced, the cluster's context becomes the current one, the file is
written 0600, and a symlink is refused. 'milner teardown' takes the
cluster's entries out again. --renew first issues a new client certificate
from the stack's secrets bundle (no apply; 'milner status' shows expiry).`, c.output, c.output, c.tool, c.env, c.home),
		Example: fmt.Sprintf("  milner %s --stack dev\n  milner %s --stack dev --stdout > /tmp/%s", c.output, c.output, c.output),
		RunE: f.run(false, func(o *op) error {
			st := o.st
			outs, err := o.outputs()
			if err != nil {
				return err
			}
			raw, ok := outs[c.output].(string)
			if !ok {
				return fmt.Errorf("stack %q has no %s output yet: run `milner up --stack %s` through the Talos layer first", st.Name(), c.output, st.Name())
			}
			// A renewal issues a certificate now: no apply, the state keeps the old one.
			if renew {
				bundle, err := stackBundle(o)
				if err != nil {
					return fmt.Errorf("renew the %s client certificate: %w", c.output, err)
				}
				if raw, err = c.renew(raw, bundle); err != nil {
					return err
				}
			}
			if c.output == kubeconfig.output {
				if raw, err = peopleOrAdmin(o, raw, admin, renew); err != nil {
					return err
				}
			}
			if stdout {
				_, err := fmt.Print(raw)
				return err
			}
			path, err := c.mergeInto(raw, file)
			if err != nil {
				return fmt.Errorf("stack %q: %w", st.Name(), err)
			}
			fmt.Printf("milner %s: merged stack %q into %s\n", c.output, st.Name(), path)
			return nil
		}),
	}
	f.addStack(cmd, false)
	cmd.Flags().StringVar(&file, "file", "", fmt.Sprintf("the %s config to merge into (default $%s or ~/%s)", c.tool, c.env, c.home))
	cmd.Flags().BoolVar(&stdout, "stdout", false, "print the config instead of merging it")
	if c.output == kubeconfig.output {
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
func peopleOrAdmin(o *op, raw string, admin, renew bool) (string, error) {
	cfg, err := o.config()
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
