package engine

import (
	"context"
	"encoding/base64"
	"testing"

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

func TestCrypter(t *testing.T) {
	s := salt(t, "right")
	c, err := crypter("right", s)
	require.NoError(t, err)
	ct, err := c.EncryptValue(context.Background(), "value")
	require.NoError(t, err)
	plain, err := c.DecryptValue(context.Background(), ct)
	require.NoError(t, err)
	assert.Equal(t, "value", plain)

	_, err = crypter("wrong", s)
	assert.ErrorIs(t, err, errWrongPassphrase)
	for _, bad := range []string{"", "v2:AAAA:x", "v1:not base64!:x", "v1:" + base64.StdEncoding.EncodeToString([]byte("salt")) + ":garbage"} {
		_, err := crypter("right", bad)
		assert.Error(t, err, bad)
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
	assert.ErrorIs(t, err, errWrongPassphrase)

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
