package engine

import "context"

// EachOutputsInClear returns the outputs of every resource of type typ in
// the stack's latest checkpoint, by logical name, secrets decrypted in
// memory only. It is how milner compares the Talos config each node's
// apply recorded with the one the program declares now (applymode), so an
// unchanged node is not asked anything.
func (s *Stack) EachOutputsInClear(ctx context.Context, typ string) (map[string]map[string]any, error) {
	snap, err := s.snapshot(ctx)
	if err != nil || snap == nil {
		return map[string]map[string]any{}, err
	}
	out := map[string]map[string]any{}
	for _, r := range snap.Resources {
		if string(r.Type) == typ && !r.Delete {
			out[r.URN.Name()] = r.Outputs.MapRepl(nil, revealSecret)
		}
	}
	return out, nil
}
