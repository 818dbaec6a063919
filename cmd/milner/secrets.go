package main

import (
	"fmt"
	"github.com/milner/milner/internal/pipeline"
	"os"
	"path/filepath"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/secretgen"
	"github.com/milner/milner/internal/secretsbundle"
	"github.com/milner/milner/internal/stackfile"
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
		RunE: f.run(false, func(o *pipeline.Op) error {
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
			fmt.Printf("milner secrets: wrote the secrets bundle of stack %q, age-encrypted for %d recipients, to %s; keep it off this machine and out of git\n", o.St.Name(), len(recipients), out)
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
				_, err := pipeline.Run(o, pipeline.SecretsImport(), pipeline.Input{})
				return err
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

// generated is one file `milner secrets generate` writes, and where its
// content goes.
type generated struct {
	name, use string
	data      []byte
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
			dir := projectDir(cmd)
			name, err := f.name(cmd)
			if err != nil {
				return err
			}
			s, err := stackfile.Read(stackfile.Path(dir, name), nil)
			if err != nil {
				return err
			}
			if in, err := within(out, dir); err != nil {
				return err
			} else if in {
				return refused("--out %s is inside the project directory %s: secrets never go into the repository; choose a directory outside it", out, dir)
			}
			files, err := stackSecrets(s.Config)
			if err != nil {
				return err
			}
			for _, g := range files {
				if _, err := os.Lstat(filepath.Join(out, g.name)); err == nil {
					return refused("%s exists: generate never overwrites a secret; nothing was written (remove it, or choose another --out)", filepath.Join(out, g.name))
				}
			}
			if err := os.MkdirAll(out, 0o700); err != nil {
				return err
			}
			fmt.Printf("milner secrets: wrote to %s (keep it out of git):\n", out)
			for _, g := range files {
				if err := engine.WritePrivateFile(filepath.Join(out, g.name), g.data); err != nil {
					return err
				}
				fmt.Printf("  %-24s %s\n", g.name, g.use)
			}
			return nil
		},
	}
	f.addStack(cmd, false)
	cmd.Flags().StringVar(&out, "out", "", "directory to write the secrets to, outside the project directory (required)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// stackSecrets generates the secrets cfg's apps need, in the order the
// command lists them.
func stackSecrets(cfg *config.Config) ([]generated, error) {
	pass, err := secretgen.Token()
	if err != nil {
		return nil, err
	}
	files := []generated{{"passphrase", "PULUMI_CONFIG_PASSPHRASE_FILE", []byte(pass)}}
	var vaults []config.AppConfig
	woodpecker := false
	for _, a := range cfg.Apps {
		if a.Vault != nil {
			vaults = append(vaults, a)
		}
		woodpecker = woodpecker || a.Woodpecker != nil
	}
	if woodpecker {
		agent, err := secretgen.Token()
		if err != nil {
			return nil, err
		}
		files = append(files, generated{"woodpecker-agent-secret", "milner:" + config.WoodpeckerAgentSecretKey, []byte(agent)})
	}
	switch len(vaults) {
	case 0:
		return files, nil
	case 1:
	default:
		return nil, fmt.Errorf("%d apps have a vault section; the secret keys milner:%s etc. serve one", len(vaults), config.VaultTLSCertKey)
	}
	names := config.VaultTLSNames(vaults[0].ReleaseName, vaults[0].Namespace)
	tls, err := secretgen.NewVaultTLS(names)
	if err != nil {
		return nil, err
	}
	return append(files,
		generated{"vault-ca.crt", "milner:" + config.VaultTLSCAKey, tls.CA},
		generated{"vault.crt", "milner:" + config.VaultTLSCertKey + " (" + strings.Join(names, ", ") + ")", tls.Cert},
		generated{"vault.key", "milner:" + config.VaultTLSKeyKey, tls.Key},
		generated{"vault-ca.key", "keep offline: signs the next certificate", tls.CAKey},
	), nil
}

// within reports whether path is dir or below it, after resolving symbolic
// links of the part of path that exists.
func within(path, dir string) (bool, error) {
	d, err := realPath(dir)
	if err != nil {
		return false, err
	}
	p, err := realPath(path)
	if err != nil {
		return false, err
	}
	rel, err := filepath.Rel(d, p)
	if err != nil {
		return false, err
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))), nil
}

// realPath is path made absolute with the symbolic links of its longest
// existing prefix resolved.
func realPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest), nil
		}
		if p == filepath.Dir(p) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// stackBundle is the secrets bundle in the stack's state.
func stackBundle(o *pipeline.Op) (*secrets.Bundle, error) {
	_, outs, err := o.St.OutputsInClear(o.Ctx, gate.TypeTalosSecrets)
	if err != nil {
		return nil, err
	}
	ms, ok := outs["machineSecrets"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("stack %q: the secrets bundle has no machineSecrets output", o.St.Name())
	}
	return secretsbundle.FromState(ms)
}
