package secretgen

import (
	"fmt"
	"strings"

	"github.com/milner/milner/stacks/config"
)

// File is one file `milner secrets generate` writes, and where its
// content goes.
type File struct {
	// Name is the file's name in the output directory.
	Name string
	// Use says where its content goes (a config key, an environment variable).
	Use string
	// Data is the secret.
	Data []byte
}

// ForStack generates the secrets cfg's apps need, in the order the
// command lists them: the passphrase, the Woodpecker agent secret (a stack
// with Woodpecker), and a Vault CA with a certificate for exactly the names
// Vault answers on (a stack with one Vault).
func ForStack(cfg *config.Config) ([]File, error) {
	pass, err := Token()
	if err != nil {
		return nil, err
	}
	files := []File{{"passphrase", "PULUMI_CONFIG_PASSPHRASE_FILE", []byte(pass)}}
	var vaults []config.AppConfig
	woodpecker := false
	for _, a := range cfg.Apps {
		if a.Vault != nil {
			vaults = append(vaults, a)
		}
		woodpecker = woodpecker || a.Woodpecker != nil
	}
	if woodpecker {
		agent, err := Token()
		if err != nil {
			return nil, err
		}
		files = append(files, File{"woodpecker-agent-secret", "milner:" + config.WoodpeckerAgentSecretKey, []byte(agent)})
	}
	switch len(vaults) {
	case 0:
		return files, nil
	case 1:
	default:
		return nil, fmt.Errorf("%d apps have a vault section; the secret keys milner:%s etc. serve one", len(vaults), config.VaultTLSCertKey)
	}
	names := vaults[0].VaultTLSNames()
	tls, err := NewVaultTLS(names)
	if err != nil {
		return nil, err
	}
	return append(files,
		File{"vault-ca.crt", "milner:" + config.VaultTLSCAKey, tls.CA},
		File{"vault.crt", "milner:" + config.VaultTLSCertKey + " (" + strings.Join(names, ", ") + ")", tls.Cert},
		File{"vault.key", "milner:" + config.VaultTLSKeyKey, tls.Key},
		File{"vault-ca.key", "keep offline: signs the next certificate", tls.CAKey},
	), nil
}
