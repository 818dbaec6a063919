package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/secretsbundle"
	"github.com/milner/milner/stacks/config"
)

// secretsCmd is `milner secrets export|import`: the cluster's Talos secrets
// bundle (every CA key) kept outside state, age-encrypted.
func secretsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Generate a new stack's secrets; export the cluster's Talos secrets bundle age-encrypted, or import it back after state loss",
	}
	cmd.AddCommand(secretsGenerateCmd(), secretsExportCmd(), secretsImportCmd())
	return cmd
}

func secretsExportCmd() *cobra.Command {
	f := &stackFlags{}
	var out string
	var recipients []string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the secrets bundle from state to an age-encrypted file (0600)",
		Example: `  age-keygen -o ~/milner-dev.key
  milner secrets export --stack dev --out milner-dev-secrets.age --recipient age1...`,
		Args: cobra.NoArgs,
		RunE: f.run(false, func(ctx context.Context, st *engine.Stack) error {
			_, outs, err := st.OutputsInClear(ctx, gate.TypeTalosSecrets)
			if err != nil {
				return err
			}
			ms, ok := outs["machineSecrets"].(map[string]any)
			if !ok {
				return fmt.Errorf("stack %q: the secrets bundle has no machineSecrets output", st.Name())
			}
			b, err := secretsbundle.FromState(ms)
			if err != nil {
				return err
			}
			plain, err := secretsbundle.Marshal(b)
			if err != nil {
				return err
			}
			sealed, err := secretsbundle.Encrypt(plain, recipients)
			if err != nil {
				return err
			}
			if err := engine.WritePrivateFile(out, sealed); err != nil {
				return err
			}
			fmt.Printf("milner secrets: wrote the secrets bundle of stack %q, age-encrypted for %d recipients, to %s; keep it off this machine and out of git\n", st.Name(), len(recipients), out)
			return nil
		}),
	}
	f.addStack(cmd)
	cmd.Flags().StringVar(&out, "out", "", "the encrypted bundle file to write (required; never commit it)")
	cmd.Flags().StringArrayVar(&recipients, "recipient", nil, "an age public key (age1..., from age-keygen) that may decrypt it (required; repeatable)")
	_ = cmd.MarkFlagRequired("out")
	_ = cmd.MarkFlagRequired("recipient")
	return cmd
}

func secretsImportCmd() *cobra.Command {
	f := &stackFlags{}
	var in, identity string
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Import an exported secrets bundle as the program's secrets resource (recovery from lost state)",
		Long: `import decrypts the bundle into a private temporary file, checks it, and
imports it as <cluster>-secrets (protected) with the pinned Pulumi CLI's
'pulumi import', in the project directory and the user's backend and
passphrase; the clear file is removed whatever happens. Run it before
adopting the nodes; docs/runbooks/recover.md.`,
		Example: `  milner secrets import --stack dev --in milner-dev-secrets.age --identity ~/milner-dev.key`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sealed, err := os.ReadFile(in)
			if err != nil {
				return err
			}
			key, err := os.ReadFile(identity)
			if err != nil {
				return err
			}
			plain, err := secretsbundle.Decrypt(sealed, bytes.NewReader(key))
			if err != nil {
				return fmt.Errorf("%s: %w", in, err)
			}
			if _, err := secretsbundle.Parse(plain); err != nil {
				return fmt.Errorf("%s: %w", in, err)
			}
			// Under Milner's stack lock: an import writes state, as up does.
			ctx, stop, st, err := f.openLocked(cmd)
			if err != nil {
				return err
			}
			defer stop()
			cfg, _, err := loadStack(st)
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "milner-secrets-")
			if err != nil {
				return err
			}
			defer func() { _ = os.RemoveAll(dir) }()
			file := filepath.Join(dir, "secrets.yaml")
			if err := engine.WritePrivateFile(file, plain); err != nil {
				return err
			}
			name := cfg.Cluster.Name + "-secrets"
			if err := pulumiImport(ctx, st, gate.TypeTalosSecrets, name, file); err != nil {
				return err
			}
			fmt.Printf("milner secrets: imported the secrets bundle into stack %q as %s (protected); next: adopt the nodes, then `milner preview --stack %s` must plan no create of a secrets bundle\n", st.Name(), name, st.Name())
			return nil
		},
	}
	f.addExplicitStack(cmd)
	cmd.Flags().StringVar(&in, "in", "", "the encrypted bundle 'milner secrets export' wrote (required)")
	cmd.Flags().StringVar(&identity, "identity", "", "the age key file (AGE-SECRET-KEY-1...) of one of its recipients (required)")
	_ = cmd.MarkFlagRequired("in")
	_ = cmd.MarkFlagRequired("identity")
	return cmd
}

// pulumiImport runs the pinned CLI's `pulumi import` in the project
// directory, against the stack's backend, with the user's passphrase
// environment: the one workflow's conventions. For the Talos secrets bundle
// the id is the bundle file's path (terraform-provider-talos ImportState).
func pulumiImport(ctx context.Context, st *engine.Stack, typ, name, id string) error {
	bin, err := st.ToolPath("pulumi")
	if err != nil {
		return err
	}
	c := exec.CommandContext(ctx, bin, "import", typ, name, id, "--yes", "--protect", "--generate-code=false", "--stack", st.Name())
	c.Dir = st.Dir()
	c.Env = append(os.Environ(), st.BackendEnv())
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("stack %q: pulumi import %s %s: %w", st.Name(), typ, name, err)
	}
	return nil
}

// secretsBundleRefusals applies gate.CheckSecretsBundle. It lists the host's
// live node VMs only when the preview creates a bundle at all, so a normal
// preview pays nothing for it.
func secretsBundleRefusals(st *engine.Stack, cfg *config.Config, steps []gate.Step) ([]gate.Refusal, error) {
	creates := false
	for _, s := range steps {
		creates = creates || (s.Type == gate.TypeTalosSecrets && s.Op == "create")
	}
	if !creates {
		return nil, nil
	}
	live, err := liveNodeVMs(cfg, steps)
	if err != nil {
		return nil, err
	}
	return gate.CheckSecretsBundle(steps, live, st.Name()), nil
}

// liveNodeVMs lists the libvirt domains named like the node VMs the
// preview declares. The Proxmox inventory needs its API; there the rule
// sees state and imports only.
func liveNodeVMs(cfg *config.Config, steps []gate.Step) ([]string, error) {
	if cfg.Substrate.Kind != config.KindLibvirt || !cfg.Declares(config.LayerSubstrate) {
		return nil, nil
	}
	declared, err := guard.DeclaredLibvirt(steps, cfg.Cluster.Name)
	if err != nil {
		return nil, err
	}
	live, err := guard.ListLibvirt(cfg.Substrate.Libvirt.URI)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, o := range live {
		if o.Type == guard.TypeDomain {
			names[o.Name] = true
		}
	}
	var out []string
	for _, d := range declared {
		if d.Type == guard.TypeDomain && names[d.Name] {
			out = append(out, d.Name)
		}
	}
	return out, nil
}
