package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	"github.com/pulumi/pulumi/pkg/v3/backend/state"
	pkgWorkspace "github.com/pulumi/pulumi/pkg/v3/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
)

// ErrNoCurrentStack is CurrentStack's error when no stack is selected.
var ErrNoCurrentStack = errors.New("no current stack")

// CurrentStack is the stack `pulumi stack select` chose for the project in
// dir on its backend (PULUMI_STACK overrides it), read with the CLI's own
// function (pkg/v3 backend/state.CurrentStackAt: the workspace settings,
// per backend URL, under ~/.pulumi/workspaces). It changes nothing.
func CurrentStack(ctx context.Context, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	project, err := workspace.LoadProject(filepath.Join(abs, "Pulumi.yaml"))
	if err != nil {
		return "", fmt.Errorf("project: %w", err)
	}
	url, err := backendURL("", project)
	if err != nil {
		return "", err
	}
	b, err := diy.New(ctx, cmdutil.Diag(), url, project)
	if err != nil {
		return "", fmt.Errorf("backend %s: %w", url, err)
	}
	st, err := state.CurrentStackAt(ctx, pkgWorkspace.Instance, b, abs)
	if err != nil {
		return "", fmt.Errorf("current stack: %w", err)
	}
	if st == nil {
		return "", ErrNoCurrentStack
	}
	return st.Ref().Name().String(), nil
}
