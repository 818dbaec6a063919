package lifecycle

import (
	"errors"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHooksRefuseButWhatTheRunAllows: each hook refuses a delete (or the
// delete of a replace), naming its rule and the resource; an Allowed URN
// (milner's gated --os-disk target) passes; the bootstrap's hook refuses
// only when the run declares the bootstrap again (a replace).
func TestHooksRefuseButWhatTheRunAllows(t *testing.T) {
	args := func(name string) *pulumi.ResourceHookArgs {
		return &pulumi.ResourceHookArgs{URN: pulumi.URN("urn:pulumi:dev::milner::t::" + name), Name: name, Type: "libvirt:index/volume:Volume"}
	}
	o := Options{Allowed: []string{"urn:pulumi:dev::milner::t::os"}}
	for rule, fn := range map[string]pulumi.ResourceHookFunction{
		KeepRelease:    o.refuse(KeepRelease, releaseRefusal),
		KeepSecrets:    o.refuse(KeepSecrets, secretsRefusal),
		KeepPersistent: o.refuse(KeepPersistent, persistentRefusal),
	} {
		err := fn(args("data"))
		var r *Refusal
		require.True(t, errors.As(err, &r), "%s refuses", rule)
		assert.Equal(t, rule, r.Rule)
		assert.Contains(t, err.Error(), "refused by Milner's rule "+rule+": data: ")
		assert.NoError(t, fn(args("os")), "%s: an allowed URN passes", rule)
	}
	assert.NoError(t, Options{}.bootstrap()(args("b")), "a delete of a bootstrap the run no longer declares")
	assert.ErrorContains(t, Options{DeclaresBootstrap: true}.bootstrap()(args("b")), "refused by Milner's rule "+KeepBootstrap)
}

// TestNoHooksBindNothing: a component built without hooks (outside a
// program run) binds none, rather than panicking.
func TestNoHooksBindNothing(t *testing.T) {
	var h *Hooks
	for _, opt := range []pulumi.ResourceOption{h.Release(), h.Secrets(), h.Persistent(), h.Bootstrap()} {
		assert.NotNil(t, opt)
	}
}
