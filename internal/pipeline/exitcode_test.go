package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExitCodesArePulumis: each kind of failure exits with the code the
// Pulumi CLI gives it (pkg/v3 v3.276.0 cmd/pulumi/cmd/exit_codes.go: 2
// configuration, 5 policy violation, 6 stack not found, 7 no changes
// expected, 8 cancelled), by its kind, also wrapped; the numbers are
// written here, not taken from the constants, so a mapping moved off
// Pulumi's fails.
func TestExitCodesArePulumis(t *testing.T) {
	noTerminal := func() error {
		f, err := os.Create(filepath.Join(t.TempDir(), "stdin"))
		require.NoError(t, err)
		defer func() { _ = f.Close() }()
		return Confirm(context.Background(), f, os.Stderr, "Teardown?", "dev")
	}()
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"none", nil, 0},
		{"an error of no kind", errors.New("boom"), 1},
		{"a rule's refusal", named(Refused("no"), "some-rule"), 5},
		{"a wrapped refusal", fmt.Errorf("stack %q: %w", "dev", Refused("no")), 5},
		{"a confirmation without a terminal", noTerminal, 2},
		{"a declined confirmation", &Refusal{Err: ErrNotConfirmed, Msg: "typed x"}, 8},
		{"an interrupt while confirming", fmt.Errorf("%w: %w", ErrNotConfirmed, context.Canceled), 8},
		{"no stack", fmt.Errorf("%w: give --stack", ErrNoStack), 6},
		{"changes pending", fmt.Errorf("stack %q: %w", "dev", ErrPending), 7},
	} {
		assert.Equal(t, tc.want, ExitCode(tc.err), tc.name)
	}
	assert.ErrorIs(t, noTerminal, ErrNoTerminal)
}
