package tests

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
)

// TestDevPinnedRemoteBootImageIsTheVerifiedCopy: a bootImage with its
// digest, remote or local, reaches the pool only from the verified copy
// `milner up` makes (named by the digest), never from the URL or the file
// hashed at preview; the unpinned default stays the factory URL.
func TestDevPinnedRemoteBootImageIsTheVerifiedCopy(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	verified, err := config.BootImageCache(sum)
	require.NoError(t, err)
	source := func(edit func(lv map[string]any)) string {
		cfg := patchKey(t, stackConfig(t, "dev", devSecrets), "milner:substrate", func(v any) { edit(v.(map[string]any)["libvirt"].(map[string]any)) })
		boot, ok := runStack(t, "dev", cfg).ByName(tVolume, "milner-dev-boot")
		require.True(t, ok)
		return boot.Inputs["source"].StringValue()
	}
	assert.Equal(t, verified, source(func(lv map[string]any) {
		lv["bootImage"], lv["bootImageSha256"] = "https://images.example/talos/metal-amd64.qcow2", sum
	}))
	assert.Equal(t, verified, source(func(lv map[string]any) {
		lv["bootImage"], lv["bootImageSha256"] = "/var/lib/milner/talos.qcow2", sum
	}))
	assert.True(t, strings.HasPrefix(source(func(map[string]any) {}), "https://factory.talos.dev/"), "the unpinned default")
}
