package engine

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunningHere: a lock is live only when its holder is a running
// process of this host.
func TestRunningHere(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.True(t, Holder{Who: "me@" + host, PID: os.Getpid()}.RunningHere(), "this process")
	assert.False(t, Holder{Who: "me@another-" + host, PID: os.Getpid()}.RunningHere(), "a pid of another host")
	assert.False(t, Holder{Who: "me@" + host}.RunningHere(), "no pid (the backend's lock of a pulumi without one)")
}
