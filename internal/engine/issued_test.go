package engine

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssuedCertificatesAreRecorded: each certificate `--renew` issues is
// written to the stack's backend with who issued it and when, and read
// back oldest first by any milner that opens the stack; another stack's
// records are not its.
func TestIssuedCertificatesAreRecorded(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"Pulumi.yaml": "name: issuedtest\nruntime: go\n", "Pulumi.a.yaml": "config: {}\n", "Pulumi.b.yaml": "config: {}\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	ctx := context.Background()
	open := func(stack string) *Stack {
		st, err := Open(ctx, Options{Stack: stack, Dir: dir, Backend: "file://" + filepath.Join(dir, "state"),
			Passphrase: "correct horse battery staple 42", Program: func(*pulumi.Context) error { return nil }, Progress: io.Discard, Command: "milner kubeconfig"})
		require.NoError(t, err)
		return st
	}
	a := open("a")
	expires := time.Date(2027, 12, 5, 0, 0, 0, 0, time.UTC)
	require.NoError(t, a.RecordIssued(ctx, Issued{Config: "kubeconfig", Subject: "admin", Groups: []string{"system:masters"}, Serial: "1f", NotAfter: expires}))
	require.NoError(t, a.RecordIssued(ctx, Issued{Config: "talosconfig", Subject: "admin", Groups: []string{"os:admin"}, Serial: "2e", NotAfter: expires}))

	got, err := open("a").IssuedCertificates(ctx)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, []string{"1f", "2e"}, []string{got[0].Serial, got[1].Serial}, "oldest first")
	assert.Equal(t, []string{"system:masters"}, got[0].Groups)
	assert.True(t, got[0].NotAfter.Equal(expires))
	assert.NotEmpty(t, got[0].Who)
	assert.Equal(t, "milner kubeconfig", got[0].Command)
	assert.False(t, got[0].At.IsZero())

	none, err := open("b").IssuedCertificates(ctx)
	require.NoError(t, err)
	assert.Empty(t, none)
}
