package conformance

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckPrintsEachFigure: the named committed stack is evaluated and
// its figure printed; without a writer nothing is.
func TestCheckPrintsEachFigure(t *testing.T) {
	var b bytes.Buffer
	figures, failed, err := Check(&b, "../..", "local")
	require.NoError(t, err)
	require.Len(t, figures, 1)
	assert.Equal(t, "local", figures[0].Stack)
	assert.Empty(t, failed)
	assert.Equal(t, figures[0].String(), b.String())
	assert.Contains(t, b.String(), "conformance local: ")

	figures, _, err = Check(nil, "../..", "local")
	require.NoError(t, err)
	assert.Len(t, figures, 1)
}
