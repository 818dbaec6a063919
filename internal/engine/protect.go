package engine

import (
	"context"
	"fmt"
)

// Protect sets the protect flag of the given resources in state
// (`pulumi state protect`): what a failed teardown uses to give back the
// protection UnprotectAll took. The program sets the same flag on its next
// run, so this only matters until then, and then it matters most.
func (s *Stack) Protect(ctx context.Context, urns []string) error {
	if len(urns) == 0 {
		return nil
	}
	args := append([]string{"state", "protect", "--yes", "--stack", s.Name()}, urns...)
	if _, stderr, _, err := s.cli(ctx, args...); err != nil {
		return fmt.Errorf("stack %q: protect: %w: %s", s.Name(), err, stderr)
	}
	return nil
}
