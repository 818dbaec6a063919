package pipeline

import (
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"

	"github.com/milner/milner/internal/engine"
)

// TestRestoreDelta: what a restore changes, by URN: resources only in the
// backup, only in the current state, and in both with another id.
func TestRestoreDelta(t *testing.T) {
	urn := func(n string) resource.URN { return resource.URN("urn:pulumi:dev::milner::t::" + n) }
	current := []engine.Resource{{URN: urn("kept"), ID: "1"}, {URN: urn("replaced"), ID: "2"}, {URN: urn("new"), ID: "3"}}
	backup := []apitype.ResourceV3{{URN: urn("kept"), ID: "1"}, {URN: urn("replaced"), ID: "9"}, {URN: urn("gone"), ID: "4"}}
	only, onlyCurrent, changed := restoreDelta(current, backup)
	assert.Equal(t, 1, only, "gone")
	assert.Equal(t, 1, onlyCurrent, "new")
	assert.Equal(t, 1, changed, "replaced")
}
