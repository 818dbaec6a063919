package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/internal/secretsbundle"
	"github.com/milner/milner/stacks"
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

// wroteSecrets is secrets export's and generate's result (--json): where
// they wrote, and for whom or which files.
type wroteSecrets struct {
	Stack      string   `json:"stack"`
	Out        string   `json:"out"`
	Recipients int      `json:"recipients,omitempty"`
	Files      []string `json:"files,omitempty"`
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
		RunE: f.run(false, func(o *pipeline.Op) error {
			if err := pipeline.ExportSecrets(o, out, recipients); err != nil {
				return err
			}
			res := wroteSecrets{Stack: o.St.Name(), Out: out, Recipients: len(recipients)}
			return emit(f.json, res, func() {
				fmt.Printf("milner secrets: wrote the secrets bundle of stack %q, age-encrypted for %d recipients, to %s; keep it off this machine and out of git\n", res.Stack, res.Recipients, res.Out)
			}, nil)
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
		Long: `import decrypts the bundle into memory (a memfd the Talos provider reads as
/proc/<milner's pid>/fd/<n>, never a file on disk), checks it, and
imports it as <cluster>-secrets (protected) through the program itself: an
update targeted at the bundle alone, which the engine stores in secret
envelopes in the checkpoint, its history and backups (the program's
AdditionalSecretOutputs); the clear bundle is gone when milner exits,
however it exits. A stack
whose state already holds a bundle is refused. Run it before adopting the
nodes; docs/runbooks/recover.md.`,
		Example: `  milner secrets import --stack dev --in milner-dev-secrets.age --identity ~/milner-dev.key`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			plain, err := secretsbundle.Open(in, identity)
			if err != nil {
				return err
			}
			clear, err := secretsbundle.NewClearFile(plain)
			if err != nil {
				return err
			}
			defer func() { _ = clear.Close() }()
			f.program = stacks.SecretsBundle(clear.Path())
			// Under Milner's stack lock: an import writes state, as up does.
			return f.run(true, func(o *pipeline.Op) error {
				return f.gated(o, pipeline.SecretsImport(), pipeline.Input{})
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

// secretsGenerateCmd is `milner secrets generate`: the secrets a new stack
// needs that nobody hands the operator, written to a directory outside the
// repository, never into the stack or the project.
func secretsGenerateCmd() *cobra.Command {
	f := &stackFlags{}
	var out string
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Write the passphrase, the Woodpecker agent secret and a Vault CA and certificate for a new stack into a directory outside the repository",
		Long: `generate writes, each 0600 into --out (created 0700, refused inside the
project directory; an existing file is never overwritten):

  passphrase               the stack passphrase: PULUMI_CONFIG_PASSPHRASE_FILE
  woodpecker-agent-secret  milner:woodpeckerAgentSecret (a stack with Woodpecker)
  vault-ca.crt             milner:vaultTlsCa (a stack with Vault)
  vault.crt, vault.key     milner:vaultTlsCert, milner:vaultTlsKey: a certificate
                           for exactly the names Vault answers on
  vault-ca.key             the CA's key: keep it offline, it signs the next certificate

It sets nothing: put the values into the stack with 'pulumi config set-all
--secret' (README, quick start). The Woodpecker forge's OAuth client id and
secret come from the forge, not from here.`,
		Example: `  milner secrets generate --stack dev --out ~/.config/milner/dev`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			name, err := f.name(cmd)
			if err != nil {
				return err
			}
			w := os.Stdout
			if f.json {
				w = os.Stderr
			}
			files, err := pipeline.GenerateSecrets(w, projectDir(cmd), name, out)
			if err != nil {
				return err
			}
			return emit(f.json, wroteSecrets{Stack: name, Out: out, Files: files}, nil, nil)
		},
	}
	f.addStack(cmd, false)
	cmd.Flags().StringVar(&out, "out", "", "directory to write the secrets to, outside the project directory (required)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}
