package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/milner/milner/internal/engine"
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
	// merge puts the stack's config into the user's; remove takes a
	// cluster's entries out.
	merge  func(user, stack map[string]any)
	remove func(user map[string]any, cluster string)
	// tool is the client that reads it, for the help text.
	tool string
}

var kubeconfig = clientConfig{
	output: "kubeconfig", env: "KUBECONFIG", home: ".kube/config", tool: "kubectl",
	merge: func(user, stack map[string]any) {
		for _, list := range []string{"clusters", "contexts", "users"} {
			user[list] = mergeNamed(user[list], stack[list])
		}
		user["current-context"] = stack["current-context"]
		for _, k := range []string{"apiVersion", "kind"} {
			if user[k] == nil {
				user[k] = stack[k]
			}
		}
	},
	remove: func(user map[string]any, cluster string) {
		users := map[string]bool{}
		var contexts []any
		for _, c := range asList(user["contexts"]) {
			ctx, _ := asMap(c)["context"].(map[string]any)
			if ctx != nil && ctx["cluster"] == cluster {
				users[fmt.Sprint(ctx["user"])] = true
				if user["current-context"] == asMap(c)["name"] {
					delete(user, "current-context")
				}
				continue
			}
			contexts = append(contexts, c)
		}
		user["contexts"] = contexts
		user["clusters"] = dropNamed(user["clusters"], func(n string) bool { return n == cluster })
		user["users"] = dropNamed(user["users"], func(n string) bool { return users[n] })
	},
}

var talosconfig = clientConfig{
	output: "talosconfig", env: "TALOSCONFIG", home: ".talos/config", tool: "talosctl",
	merge: func(user, stack map[string]any) {
		contexts := asMap(user["contexts"])
		for name, c := range asMap(stack["contexts"]) {
			contexts[name] = c
		}
		user["contexts"] = contexts
		user["context"] = stack["context"]
	},
	remove: func(user map[string]any, cluster string) {
		contexts := asMap(user["contexts"])
		delete(contexts, cluster)
		user["contexts"] = contexts
		if user["context"] == cluster {
			delete(user, "context")
		}
	},
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

// read reads the user's file (empty when it does not exist), refusing a
// symlink: the file holds credentials and is rewritten 0600.
func readClientFile(path string) (map[string]any, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return map[string]any{}, nil
	case err != nil:
		return nil, err
	case fi.Mode()&os.ModeSymlink != 0:
		return nil, fmt.Errorf("%s is a symlink; milner does not write through it (give --file)", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// writeClientFile writes m to path, 0600 (also when it existed with wider
// permissions, never through a symlink), its directory 0700 when created.
func writeClientFile(path string, m map[string]any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	return engine.WritePrivateFile(path, b)
}

// removeFrom takes cluster's entries out of the user's file, if it exists.
func (c clientConfig) removeFrom(cluster, file string) error {
	path, err := c.path(file)
	if err != nil {
		return err
	}
	m, err := readClientFile(path)
	if err != nil || len(m) == 0 {
		return err
	}
	c.remove(m, cluster)
	return writeClientFile(path, m)
}

func clientCmd(c clientConfig) *cobra.Command {
	f := &stackFlags{}
	var file string
	var stdout, renew bool
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
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop, st, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer stop()
			outs, err := st.Outputs(ctx, true)
			if err != nil {
				return err
			}
			raw, ok := outs[c.output].(string)
			if !ok {
				return fmt.Errorf("stack %q has no %s output yet: run `milner up --stack %s` through the Talos layer first", st.Name(), c.output, st.Name())
			}
			if renew {
				if raw, err = renewClient(ctx, st, c.output, raw); err != nil {
					return err
				}
			}
			if stdout {
				_, err := fmt.Print(raw)
				return err
			}
			stack := map[string]any{}
			if err := yaml.Unmarshal([]byte(raw), &stack); err != nil {
				return fmt.Errorf("stack %q: %s output: %w", st.Name(), c.output, err)
			}
			path, err := c.path(file)
			if err != nil {
				return err
			}
			user, err := readClientFile(path)
			if err != nil {
				return err
			}
			c.merge(user, stack)
			if err := writeClientFile(path, user); err != nil {
				return err
			}
			fmt.Printf("milner %s: merged stack %q into %s\n", c.output, st.Name(), path)
			return nil
		},
	}
	f.addStack(cmd)
	cmd.Flags().StringVar(&file, "file", "", fmt.Sprintf("the %s config to merge into (default $%s or ~/%s)", c.tool, c.env, c.home))
	cmd.Flags().BoolVar(&stdout, "stdout", false, "print the config instead of merging it")
	cmd.Flags().BoolVar(&renew, "renew", false, "issue a new client certificate (one year) from the stack's secrets bundle first; no apply")
	return cmd
}

// mergeNamed merges two lists of {name: ...} entries: same names replaced.
func mergeNamed(into, from any) []any {
	out := asList(into)
	for _, e := range asList(from) {
		name := asMap(e)["name"]
		replaced := false
		for i, old := range out {
			if asMap(old)["name"] == name {
				out[i], replaced = e, true
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}

// dropNamed drops the entries of a named list whose name matches.
func dropNamed(list any, drop func(string) bool) []any {
	var out []any
	for _, e := range asList(list) {
		if !drop(strings.TrimSpace(fmt.Sprint(asMap(e)["name"]))) {
			out = append(out, e)
		}
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func asMap(v any) map[string]any {
	if m, ok := v.(map[string]any); ok {
		return m
	}
	return map[string]any{}
}
