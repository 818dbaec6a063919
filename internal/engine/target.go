package engine

import (
	"context"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/resource/deploy"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
)

// UpTarget applies the program to one top-level resource, typ and name,
// alone (`pulumi up --target`): the engine steps nothing else of the
// program, deletes nothing the program leaves out, and only the providers
// and the stack resource follow it (pkg/v3 v3.276.0 step_generator.go:
// isImplicitlyTargetedResource). `milner secrets import` runs the bundle's
// one-shot import with it (stacks.SecretsBundle).
func (s *Stack) UpTarget(ctx context.Context, typ, name string) (*Result, error) {
	urn := resource.NewURN(tokens.QName(s.name), s.project.Name, "", tokens.Type(typ), name)
	return s.apply(ctx, "up", func(ctx context.Context, st backend.Stack, op backend.UpdateOperation) error {
		op.Opts.Engine.Targets = deploy.NewUrnTargets([]string{string(urn)})
		_, err := backend.UpdateStack(ctx, st, op, nil)
		return err
	})
}
