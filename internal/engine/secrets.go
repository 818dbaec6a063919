package engine

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
)

// errWrongPassphrase is the error of a passphrase that does not open a
// stack file's encryption salt.
var errWrongPassphrase = errors.New("wrong passphrase")

// crypter returns the crypter of Pulumi's passphrase secrets provider for a
// stack file's encryption salt ("v1:<base64 salt>:<the word pulumi,
// encrypted>"), checking the passphrase against the salt's encrypted word.
// It costs one key derivation (PBKDF2, about 0.2 s of CPU).
func crypter(pass, encryptionSalt string) (config.Crypter, error) {
	parts := strings.SplitN(encryptionSalt, ":", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		return nil, fmt.Errorf("unknown encryption salt %q", encryptionSalt)
	}
	salt, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("encryption salt: %w", err)
	}
	c := config.NewSymmetricCrypterFromPassphrase(pass, salt)
	if word, err := c.DecryptValue(context.Background(), parts[2]); err != nil || word != "pulumi" {
		return nil, errWrongPassphrase
	}
	return c, nil
}

// fileSecrets are the decrypted secrets of a stack file.
type fileSecrets struct {
	plain map[config.Key]string
	// salt and crypter are the stack file's; the crypter is reused when the
	// workspace stack has the same salt.
	salt    string
	crypter config.Crypter
}

// readSecrets decrypts the secret values of the stack file (set there with
// `pulumi config set --secret`) with its salt and the passphrase. Open calls
// it before it creates or selects anything, so a wrong passphrase leaves no
// trace; nil when the file has no secrets.
func readSecrets(o Options, pass string, project *workspace.Project) (*fileSecrets, error) {
	file, err := workspace.LoadProjectStack(nil, project, o.ConfigFile)
	if err != nil {
		return nil, fmt.Errorf("stack %q: read %s: %w", o.Stack, o.ConfigFile, err)
	}
	var secure []config.Key
	for k, v := range file.Config {
		if v.Secure() {
			secure = append(secure, k)
		}
	}
	if len(secure) == 0 {
		return nil, nil
	}
	if p := file.SecretsProvider; p != "" && p != "passphrase" && p != "default" || file.EncryptionSalt == "" {
		return nil, fmt.Errorf("stack %q: %s: its secrets are not encrypted with a passphrase (secretsprovider %q); Milner reads secrets set with the passphrase in %s",
			o.Stack, o.ConfigFile, file.SecretsProvider, PassphraseEnv)
	}
	c, err := crypter(pass, file.EncryptionSalt)
	if err != nil {
		return nil, fmt.Errorf("stack %q: decrypt the secrets of %s (is %s the passphrase they were set with?): %w", o.Stack, o.ConfigFile, PassphraseEnv, err)
	}
	sec := &fileSecrets{plain: make(map[config.Key]string, len(secure)), salt: file.EncryptionSalt, crypter: c}
	for _, k := range secure {
		if sec.plain[k], err = file.Config[k].Value(c); err != nil {
			return nil, fmt.Errorf("stack %q: decrypt %s: %w", o.Stack, k, err)
		}
	}
	return sec, nil
}

// setSecrets encrypts the stack file's secrets again for the workspace
// stack, in this process, for SetConfig to write: no value is ever on a
// command line or on disk in the clear, and no CLI starts (one more key
// derivation when the workspace stack has a salt of its own).
func (s *Stack) setSecrets(ctx context.Context, sec *fileSecrets, pass string) error {
	if sec == nil {
		return nil
	}
	settings, err := s.stack.Workspace().StackSettings(ctx, s.Name())
	if err != nil {
		return fmt.Errorf("stack %q: read settings: %w", s.Name(), err)
	}
	to := sec.crypter
	switch {
	case settings.EncryptionSalt == "":
		// A workspace file without a salt (its directory was wiped): it
		// takes the stack file's, so the same passphrase opens both.
		s.salt = sec.salt
	case settings.EncryptionSalt != sec.salt:
		if to, err = crypter(pass, settings.EncryptionSalt); err != nil {
			return fmt.Errorf("stack %q: the work directory's stack settings (is %s the stack's passphrase?): %w", s.Name(), PassphraseEnv, err)
		}
	}
	s.secure = make(map[config.Key]string, len(sec.plain))
	for k, plain := range sec.plain {
		if s.secure[k], err = to.EncryptValue(ctx, plain); err != nil {
			return fmt.Errorf("stack %q: encrypt %s: %w", s.Name(), k, err)
		}
	}
	return nil
}
