package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	pkgengine "github.com/pulumi/pulumi/pkg/v3/engine"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWeakPassphraseRefused: a stack that can hold secrets refuses an
// empty passphrase, the public one and a passphrase file others can read,
// wherever they come from; a stack that cannot keeps the public default.
func TestWeakPassphraseRefused(t *testing.T) {
	require.NoError(t, os.Unsetenv(PassphraseEnv))
	t.Setenv(PassphraseFileEnv, "")
	talos := &workspace.ProjectStack{Config: config.Map{}}
	substrateOnly := &workspace.ProjectStack{Config: config.Map{config.MustMakeKey("milner", "stopAfter"): config.NewValue("substrate")}}

	_, err := passphrase(Options{Stack: "dev", Passphrase: NoSecretsPassphrase}, talos)
	assert.ErrorContains(t, err, "public")

	t.Setenv(PassphraseEnv, "")
	_, err = passphrase(Options{Stack: "dev"}, talos)
	assert.ErrorContains(t, err, "empty")
	t.Setenv(PassphraseEnv, NoSecretsPassphrase)
	_, err = passphrase(Options{Stack: "dev"}, talos)
	assert.ErrorContains(t, err, PassphraseEnv)
	p, err := passphrase(Options{Stack: "local"}, substrateOnly)
	require.NoError(t, err, "a stack that holds no secret may use the public passphrase")
	assert.Equal(t, NoSecretsPassphrase, p)
	require.NoError(t, os.Unsetenv(PassphraseEnv))

	file := filepath.Join(t.TempDir(), "pass")
	require.NoError(t, os.WriteFile(file, []byte("a-real-one\n"), 0o644))
	t.Setenv(PassphraseFileEnv, file)
	_, err = passphrase(Options{Stack: "dev"}, talos)
	assert.ErrorContains(t, err, "chmod 600 "+file)
	require.NoError(t, os.Chmod(file, 0o600))
	p, err = passphrase(Options{Stack: "dev"}, talos)
	require.NoError(t, err)
	assert.Equal(t, "a-real-one", p)
	require.NoError(t, os.WriteFile(file, []byte("\n"), 0o600))
	_, err = passphrase(Options{Stack: "dev"}, talos)
	assert.ErrorContains(t, err, "empty")
}

// TestScopeCancelsThenTerminates: the caller's context cancelled asks the
// engine to cancel (not terminate), Terminate closed terminates, and the
// context the backend runs on is cancelled by neither; the operation is
// marked in flight from the scope's start to its Close.
func TestScopeCancelsThenTerminates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	in := &testInterrupts{term: make(chan struct{})}
	base := engineContext(ctx)
	events := make(chan pkgengine.Event, 4)
	sc := scopes{graceful: ctx, in: in}.NewScope(base, events, false)
	assert.Equal(t, int32(1), in.ops.Load(), "the operation is marked")
	c := sc.Context()
	assert.NoError(t, c.CancelErr())
	cancel()
	waitFor(t, c.Canceled())
	assert.NoError(t, c.TerminateErr(), "the first interrupt does not terminate")
	assert.NoError(t, base.Err(), "the backend's context outlives the interrupt")
	close(in.term)
	waitFor(t, c.Terminated())
	sc.Close()
	assert.Zero(t, in.ops.Load(), "Close ends the mark")
	assert.NoError(t, base.Err())
	assert.Len(t, events, 2, "the engine's log says both")
}

// testInterrupts counts the operations marked in flight.
type testInterrupts struct {
	term chan struct{}
	ops  atomic.Int32
}

func (i *testInterrupts) Terminate() <-chan struct{} { return i.term }
func (i *testInterrupts) Operation() func() {
	i.ops.Add(1)
	return func() { i.ops.Add(-1) }
}

func waitFor(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal(errors.New("not signalled within 5 s"))
	}
}
