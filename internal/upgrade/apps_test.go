package upgrade

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sealedAfter scripts the apps gate the way a Vault pod behaves on the
// Talos double: once node has rebooted its Vault pod is sealed, and stays
// so for polls checks (forever when polls < 0).
func sealedAfter(fc *fakeCluster, node string, polls int) func(context.Context) error {
	return func(context.Context) error {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		fc.log("apps gate")
		booted := false
		for _, e := range fc.journal {
			booted = booted || strings.HasPrefix(e, node+" booted ")
		}
		if !booted || polls == 0 {
			return nil
		}
		polls--
		return errors.New("apps not ready: statefulset vault/vault has 2/3 replicas ready: vault-1 is sealed: run `milner vault unseal`")
	}
}

func TestAppsGateStopsBeforeTheNextNode(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	o := testOptions(&strings.Builder{})
	o.AppsTimeout = 300 * time.Millisecond
	o.Apps = sealedAfter(fc, "cp-1", -1)

	err := Execute(context.Background(), connect(t, d, tc), o, false, yes)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "cp-1", stop.Node)
	assert.Equal(t, "apps after", stop.Stage)
	assert.ErrorContains(t, err, "vault-1 is sealed: run `milner vault unseal`")
	assert.Equal(t, []string{"cp-1"}, stop.Upgraded)
	assert.Equal(t, []string{"cp-2", "cp-3", "w-1", "w-2"}, stop.Untouched)
	assert.False(t, stop.NothingChanged())
	assert.Len(t, fc.upgrades(), 1, "a node was upgraded while Vault was sealed")
}

func TestAppsGateWaitsForTheApps(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	o := testOptions(&strings.Builder{})
	o.AppsTimeout = 300 * time.Millisecond
	o.Apps = sealedAfter(fc, "cp-2", 3) // unsealed after three polls
	require.NoError(t, Execute(context.Background(), connect(t, d, tc), o, false, yes))
	assert.Len(t, fc.upgrades(), 5)

	// Between every two Upgrade calls the gate was asked.
	fc.mu.Lock()
	defer fc.mu.Unlock()
	asked := true
	for _, e := range fc.journal {
		switch {
		case e == "apps gate":
			asked = true
		case strings.Contains(e, " Upgrade "):
			assert.True(t, asked, "no apps gate before %q", e)
			asked = false
		}
	}
}

func TestAppsNotReadyBeforeTheFirstNodeTouchesNothing(t *testing.T) {
	fc, d, tc := newFake(t, fiveNodes()...)
	o := testOptions(&strings.Builder{})
	o.AppsTimeout = 300 * time.Millisecond
	o.Apps = func(context.Context) error { return errors.New("apps not ready: vault-0 is sealed") }

	err := Execute(context.Background(), connect(t, d, tc), o, false, yes)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "apps before", stop.Stage)
	assert.True(t, stop.NothingChanged())
	assert.Empty(t, fc.upgrades())
}
