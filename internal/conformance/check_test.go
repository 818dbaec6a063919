package conformance

import (
	"bytes"
	"testing"

	"github.com/milner/milner/stacks/config"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckPrintsEachFigure: the named committed stack is evaluated and
// its figure printed; without a writer nothing is.
func TestCheckPrintsEachFigure(t *testing.T) {
	var b bytes.Buffer
	figures, failed, _, err := Check(&b, "../..", "local")
	require.NoError(t, err)
	require.Len(t, figures, 1)
	assert.Equal(t, "local", figures[0].Stack)
	assert.Empty(t, failed)
	assert.Equal(t, figures[0].String(), b.String())
	assert.Contains(t, b.String(), "conformance local: ")

	figures, _, _, err = Check(nil, "../..", "local")
	require.NoError(t, err)
	assert.Len(t, figures, 1)
}

// TestMissingValidatorIsNotABrokenStack: without the validators built, the
// Talos config rule of a stack that declares the Talos layer is reported
// as not checked, naming the tools to build, and the stack does not fail.
func TestMissingValidatorIsNotABrokenStack(t *testing.T) {
	ev := dev(t)
	ev.Tools = t.TempDir()
	fig := Evaluate("dev", ev)
	assert.True(t, fig.OK(), "a missing validator must not fail the stack:\n%s", fig)
	assert.Equal(t, []string{"talos-validate-" + config.GeneratorMachinery, "talos-validate-v1.13.9"}, fig.Unchecked())
	assert.Contains(t, fig.String(), "not checked: talos-validate-"+config.GeneratorMachinery+", talos-validate-v1.13.9 not built")
	assert.Contains(t, fig.String(), "SKIP  every node config")
}
