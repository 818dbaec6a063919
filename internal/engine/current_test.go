package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	"github.com/pulumi/pulumi/pkg/v3/backend/state"
	pkgWorkspace "github.com/pulumi/pulumi/pkg/v3/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCurrentStack: CurrentStack reads what `pulumi stack select` wrote.
// The selection is made with the function the CLI's `stack select` calls
// (pkg/v3 backend/state.SetCurrentStack, run from the project directory),
// on a file backend holding the stack; PULUMI_STACK overrides it.
func TestCurrentStack(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("PULUMI_HOME", filepath.Join(home, ".pulumi"))
	url := "file://" + filepath.Join(home, "state")
	require.NoError(t, os.Mkdir(filepath.Join(home, "state"), 0o700))
	t.Setenv(BackendEnv, url)
	require.NoError(t, os.Unsetenv("PULUMI_STACK"))
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	ctx := context.Background()

	_, err = CurrentStack(ctx, root)
	require.True(t, errors.Is(err, ErrNoCurrentStack), "nothing selected yet: %v", err)

	project, err := workspace.LoadProject(filepath.Join(root, "Pulumi.yaml"))
	require.NoError(t, err)
	b, err := diy.New(ctx, cmdutil.Diag(), url, project)
	require.NoError(t, err)
	for _, name := range []string{"local", "dev"} {
		ref, err := b.ParseStackReference(name)
		require.NoError(t, err)
		_, err = b.CreateStack(ctx, ref, "", nil, nil)
		require.NoError(t, err)
	}
	t.Chdir(root) // `pulumi stack select` runs in the project directory
	require.NoError(t, state.SetCurrentStack(pkgWorkspace.Instance, b.URL(), "local"))

	got, err := CurrentStack(ctx, root)
	require.NoError(t, err)
	assert.Equal(t, "local", got)

	t.Setenv("PULUMI_STACK", "dev")
	got, err = CurrentStack(ctx, root)
	require.NoError(t, err)
	assert.Equal(t, "dev", got, "PULUMI_STACK overrides the selection, as in the CLI")
}
