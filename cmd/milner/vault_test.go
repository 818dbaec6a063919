package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/internal/vault"
	"github.com/milner/milner/tests/vaultapi"
)

// TestJSONOfVault decodes, strictly, the --json results of milner vault
// against the Vault API double over TLS: status of a sealed Vault (its
// document, then exit 1 as the help says), unseal from a shares file (the
// status after: unsealed, progress 0), status again (exit 0), and audit
// with a token file (the device's path; enabled on the first run only).
func TestJSONOfVault(t *testing.T) {
	v := vaultapi.Sealed()
	addr, ca := vaultapi.Serve(t, v)
	dir := t.TempDir()
	caFile, shares, token := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "shares"), filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(caFile, ca, 0o600))
	require.NoError(t, os.WriteFile(shares, []byte("s2\ns4\ns5\n"), 0o600))
	require.NoError(t, os.WriteFile(token, []byte("root\n"), 0o600))
	// jsonOf runs milner vault <args> --json, wants exit code, decodes its
	// one document strictly into out.
	jsonOf := func(out any, code int, args ...string) {
		t.Helper()
		doc := stdout(t, func() {
			assert.Equal(t, code, run(append(append([]string{"vault"}, args...), "--addr", addr, "--ca-file", caFile, "--json")))
		})
		decode(t, doc, out)
	}

	var sealed vault.SealStatus
	jsonOf(&sealed, 1, "status")
	assert.True(t, sealed.Initialized)
	assert.True(t, sealed.Sealed)
	assert.Equal(t, 3, sealed.T)
	assert.Equal(t, 5, sealed.N)
	assert.Equal(t, "raft", sealed.StorageType)

	var unsealed vault.SealStatus
	jsonOf(&unsealed, pipeline.ExitOK, "unseal", "--shares-file", shares)
	assert.False(t, unsealed.Sealed)
	assert.Zero(t, unsealed.Progress)
	assert.Equal(t, 3, v.UnsealCalls(), "the threshold's shares, no more")

	var again vault.SealStatus
	jsonOf(&again, pipeline.ExitOK, "status")
	assert.False(t, again.Sealed)

	for _, enabled := range []bool{true, false} {
		var a audited
		jsonOf(&a, pipeline.ExitOK, "audit", "--token-file", token)
		assert.Equal(t, audited{Path: vault.DefaultAuditPath, Enabled: enabled}, a)
	}
	assert.Contains(t, v.Audit, "file/")
}
