package engine

import (
	"context"
	"fmt"
)

// OutputsInClear returns the logical name and the outputs of the one
// resource of type typ in the stack's latest checkpoint, secrets decrypted
// in memory only. It is what `milner secrets export` reads the cluster's
// secrets bundle with.
func (s *Stack) OutputsInClear(ctx context.Context, typ string) (string, map[string]any, error) {
	st, err := s.existing(ctx)
	if err != nil {
		return "", nil, err
	}
	if st == nil {
		return "", nil, fmt.Errorf("stack %q: no state in %s", s.name, s.shown)
	}
	snap, err := st.Snapshot(ctx, lazyProvider{pass: s.pass})
	if err != nil {
		return "", nil, fmt.Errorf("stack %q: read state: %w", s.name, err)
	}
	if snap != nil {
		for _, r := range snap.Resources {
			if string(r.Type) == typ && !r.Delete {
				return r.URN.Name(), r.Outputs.MapRepl(nil, revealSecret), nil
			}
		}
	}
	return "", nil, fmt.Errorf("stack %q: the state holds no %s", s.name, typ)
}

// Pending returns the URNs of the operations the stack's latest checkpoint
// records as started and never finished (pending_operations: a create or
// delete the engine began and was stopped in, e.g. by a terminate or a
// crash). A graceful cancel leaves none.
func (s *Stack) Pending(ctx context.Context) ([]string, error) {
	state, err := s.deployment(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, op := range state.PendingOperations {
		out = append(out, string(op.Type)+" "+string(op.Resource.URN))
	}
	return out, nil
}
