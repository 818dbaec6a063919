// Package clientfiles is the client configs a stack outputs (the admin
// kubeconfig, the talosctl config) and their merge into, and removal from,
// the user's files, through each client's own library.
package clientfiles

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/milner/milner/internal/certs"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Config is one kind of client config a stack outputs: the admin
// kubeconfig or the talosctl config.
type Config struct {
	// Output is the stack output holding it.
	Output string
	// Env names the variable that points to the user's file.
	Env string
	// Home is the default file, relative to the home directory.
	Home string
	// Merge puts the stack's config (the output's text) into the user's
	// file at path, its context made current unless keepCurrent and the
	// file has one, and returns the current context before and after;
	// remove takes a cluster's entries out of it. Both read and write
	// through the client's own library.
	Merge  func(path, stack string, keepCurrent bool) (Contexts, error)
	Remove func(path, cluster string) error
	// Tool is the client that reads it, for the help text.
	Tool string
	// Renew issues the config's client certificate anew from the stack's
	// secrets bundle.
	Renew func(config string, bundle *secrets.Bundle) (string, error)
}

// Kube is the admin kubeconfig (the kubeconfig output), read by kubectl.
var Kube = Config{
	Output: "kubeconfig", Env: "KUBECONFIG", Home: ".kube/config", Tool: "kubectl", Renew: certs.RenewKubeconfig,
	Merge: func(path, stack string, keepCurrent bool) (Contexts, error) {
		from, err := clientcmd.Load([]byte(stack))
		if err != nil {
			return Contexts{}, fmt.Errorf("kubeconfig output: %w", err)
		}
		var c Contexts
		err = modifyKubeconfig(path, func(user *clientcmdapi.Config) {
			maps.Copy(user.Clusters, from.Clusters)
			maps.Copy(user.AuthInfos, from.AuthInfos)
			maps.Copy(user.Contexts, from.Contexts)
			c = Contexts{Before: user.CurrentContext, Merged: from.CurrentContext, After: current(user.CurrentContext, from.CurrentContext, keepCurrent)}
			user.CurrentContext = c.After
		})
		return c, err
	},
	Remove: func(path, cluster string) error {
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

// Talos is the talosctl config (the talosconfig output).
var Talos = Config{
	Output: "talosconfig", Env: "TALOSCONFIG", Home: ".talos/config", Tool: "talosctl", Renew: certs.RenewTalosconfig,
	Merge: func(path, stack string, keepCurrent bool) (Contexts, error) {
		from, err := clientconfig.FromString(stack)
		if err != nil {
			return Contexts{}, fmt.Errorf("talosconfig output: %w", err)
		}
		var c Contexts
		err = modifyTalosconfig(path, func(user *clientconfig.Config) {
			maps.Copy(user.Contexts, from.Contexts)
			c = Contexts{Before: user.Context, Merged: from.Context, After: current(user.Context, from.Context, keepCurrent)}
			user.Context = c.After
		})
		return c, err
	},
	Remove: func(path, cluster string) error {
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

// Path is the user's file: $env's first entry, or ~/home.
func (c Config) Path(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if v := os.Getenv(c.Env); v != "" {
		return filepath.SplitList(v)[0], nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(h, c.Home), nil
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

// Contexts are the user's current context before and after a merge, and
// the context the merge brought.
type Contexts struct {
	Before, Merged, After string
}

// Changed reports whether the merge changed the current context.
func (c Contexts) Changed() bool { return c.Before != c.After }

// current is the current context after merging one that names merged:
// merged, unless keepCurrent and the file has one.
func current(before, merged string, keepCurrent bool) string {
	if keepCurrent && before != "" {
		return before
	}
	return merged
}

// MergeInto merges the stack's config into the user's file; keepCurrent
// leaves a current context the file has as it is.
func (c Config) MergeInto(stack, file string, keepCurrent bool) (string, Contexts, error) {
	path, err := c.Path(file)
	if err != nil {
		return "", Contexts{}, err
	}
	if _, err := privateFile(path); err != nil {
		return "", Contexts{}, err
	}
	ctxs, err := c.Merge(path, stack, keepCurrent)
	return path, ctxs, err
}

// RemoveFrom takes cluster's entries out of the user's file, if it exists.
func (c Config) RemoveFrom(cluster, file string) error {
	path, err := c.Path(file)
	if err != nil {
		return err
	}
	exists, err := privateFile(path)
	if err != nil || !exists {
		return err
	}
	return c.Remove(path, cluster)
}
