package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/secretsbundle"
	"github.com/milner/milner/stacks"
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
		RunE: f.run(false, func(o *op) error {
			b, err := stackBundle(o)
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
			fmt.Printf("milner secrets: wrote the secrets bundle of stack %q, age-encrypted for %d recipients, to %s; keep it off this machine and out of git\n", o.st.Name(), len(recipients), out)
			return nil
		}),
	}
	f.addStack(cmd, false)
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
imports it as <cluster>-secrets (protected) through the program itself: an
update targeted at the bundle alone, which the engine stores in secret
envelopes in the checkpoint, its history and backups (the program's
AdditionalSecretOutputs); the clear file is removed whatever happens. A stack
whose state already holds a bundle is refused. Run it before adopting the
nodes; docs/runbooks/recover.md.`,
		Example: `  milner secrets import --stack dev --in milner-dev-secrets.age --identity ~/milner-dev.key`,
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
			dir, err := os.MkdirTemp("", "milner-secrets-")
			if err != nil {
				return err
			}
			defer func() { _ = os.RemoveAll(dir) }()
			file := filepath.Join(dir, "secrets.yaml")
			f.program = stacks.SecretsBundle(file)
			// Under Milner's stack lock: an import writes state, as up does.
			return f.run(true, func(o *op) error {
				name, err := bundleToImport(o)
				if err != nil {
					return err
				}
				if err := engine.WritePrivateFile(file, plain); err != nil {
					return err
				}
				r, err := o.st.UpTarget(o.ctx, gate.TypeTalosSecrets, name)
				if err != nil {
					return err
				}
				if !slices.ContainsFunc(r.Steps, func(s gate.Step) bool { return s.Type == gate.TypeTalosSecrets && s.Op == apitype.OpImport }) {
					return fmt.Errorf("stack %q: the update imported no %s", o.st.Name(), name)
				}
				fmt.Printf("milner secrets: imported the secrets bundle into stack %q as %s (protected, its outputs secret); next: adopt the nodes, then `milner preview --stack %s` must plan no create of a secrets bundle\n", o.st.Name(), name, o.st.Name())
				return nil
			})(cmd, nil)
		},
	}
	f.addStack(cmd, true)
	cmd.Flags().StringVar(&in, "in", "", "the encrypted bundle 'milner secrets export' wrote (required)")
	cmd.Flags().StringVar(&identity, "identity", "", "the age key file (AGE-SECRET-KEY-1...) of one of its recipients (required)")
	_ = cmd.MarkFlagRequired("in")
	_ = cmd.MarkFlagRequired("identity")
	return cmd
}

// bundleToImport is the logical name of the stack's secrets bundle, refusing
// a stack without a Talos layer and one whose state already holds a bundle:
// importing again would replace the cluster's root of trust.
func bundleToImport(o *op) (string, error) {
	cfg, err := o.config()
	if err != nil {
		return "", err
	}
	if !cfg.Declares(config.LayerTalos) {
		return "", refused("stack %q declares no Talos layer, so it has no secrets bundle; nothing was changed", o.st.Name())
	}
	held, err := o.find(gate.TypeTalosSecrets, "")
	if err != nil {
		return "", err
	}
	if held != nil {
		return "", refused("stack %q already holds the secrets bundle %s; an import would replace the cluster's root of trust, so nothing was changed (a damaged state: docs/runbooks/recover.md)", o.st.Name(), held.Name())
	}
	return cfg.Cluster.Name + "-secrets", nil
}

// secretsBundleRefusals applies gate.CheckSecretsBundle. It lists the host's
// live node VMs only when the preview creates a bundle at all, so a normal
// preview pays nothing for it.
func secretsBundleRefusals(o *op, steps []gate.Step) ([]gate.Refusal, error) {
	if !slices.ContainsFunc(steps, func(s gate.Step) bool { return s.Type == gate.TypeTalosSecrets && s.Op == apitype.OpCreate }) {
		return nil, nil
	}
	live, err := liveNodeVMs(o.cfg, steps)
	if err != nil {
		return nil, err
	}
	return gate.CheckSecretsBundle(steps, live, o.st.Name()), nil
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
	var out []string
	for _, d := range declared {
		if d.Type == guard.TypeDomain && slices.ContainsFunc(live, func(o guard.Object) bool { return o.Type == guard.TypeDomain && o.Name == d.Name }) {
			out = append(out, d.Name)
		}
	}
	return out, nil
}
