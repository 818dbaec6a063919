package engine

import (
	"context"
	"encoding/base64"
	"testing"

	pkgpassphrase "github.com/pulumi/pulumi/pkg/v3/secrets/passphrase"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// salt makes an encryption salt the way Pulumi's passphrase provider
// writes it into a stack file.
func salt(t *testing.T, pass string) string {
	t.Helper()
	raw := []byte("0123456789abcdef")
	check, err := config.NewSymmetricCrypterFromPassphrase(pass, raw).EncryptValue(context.Background(), "pulumi")
	require.NoError(t, err)
	return "v1:" + base64.StdEncoding.EncodeToString(raw) + ":" + check
}

// TestPassphraseManager: the lazy manager is Pulumi's passphrase manager
// for the salt: what it encrypts it decrypts, a wrong passphrase and a
// malformed salt are errors naming the passphrase variables.
func TestPassphraseManager(t *testing.T) {
	ctx := context.Background()
	s := salt(t, "right")
	c := lazyPassphrase("right", s)
	ct, err := c.Encrypter().EncryptValue(ctx, "value")
	require.NoError(t, err)
	plain, err := c.Decrypter().DecryptValue(ctx, ct)
	require.NoError(t, err)
	assert.Equal(t, "value", plain)

	_, err = lazyPassphrase("wrong", salt(t, "other")).Decrypter().DecryptValue(ctx, ct)
	assert.ErrorIs(t, err, pkgpassphrase.ErrIncorrectPassphrase)
	for _, bad := range []string{"", "v2:AAAA:x", "v1:not base64!:x", "v1:" + base64.StdEncoding.EncodeToString([]byte("salt")) + ":garbage"} {
		_, err := lazyPassphrase("right", bad).Decrypter().DecryptValue(ctx, ct)
		assert.ErrorContains(t, err, PassphraseEnv, bad)
	}
}

// TestLazyPassphrase: the in-process preview's secrets managers derive
// their key only when a value is read or written, so a wrong passphrase
// surfaces then, and a stack without secrets never pays for the KDF.
func TestLazyPassphrase(t *testing.T) {
	ctx := context.Background()
	s := salt(t, "right")

	wrong := lazyPassphrase("wrong", s) // nothing derived yet: no error
	_, err := wrong.Decrypter().DecryptValue(ctx, "anything")
	assert.ErrorIs(t, err, pkgpassphrase.ErrIncorrectPassphrase)

	m, err := lazyProvider{pass: "right"}.OfType(ctx, "passphrase", lazyPassphrase("right", s).State())
	require.NoError(t, err)
	ct, err := m.Encrypter().EncryptValue(ctx, "value")
	require.NoError(t, err)
	plain, err := m.Decrypter().DecryptValue(ctx, ct)
	require.NoError(t, err)
	assert.Equal(t, "value", plain)

	_, err = lazyProvider{pass: "right"}.OfType(ctx, "awskms", nil)
	assert.Error(t, err, "only the passphrase provider")
}
