package appsadopt

import (
	"fmt"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/internal/gate"
)

// RunKeys are the inputs of a helm.sh/v3 Release that say how Helm runs
// and where the chart is fetched from, not what the release is: every
// field of the provider's Release (pulumi-kubernetes provider/v4
// v4.0.0-20260115033456-f47bc2d6f199 pkg/provider/helm_release.go, type
// Release) but name, namespace, version, values, allowNullValues and the
// outputs resourceNames and status. The provider's import leaves them out
// of the state it reads (Read → setReleaseAttributes and importRelease
// fill only name, namespace, chart, version and values; setDefaults adds
// timeout to the inputs only), and its Diff compares the program's inputs
// with that state (CreateThreeWayMergePatch of the old inputs, the new
// inputs and the old state), so without them in state every imported
// release would diff and its next up run a Helm upgrade.
var RunKeys = []string{
	"atomic", "chart", "cleanupOnFail", "createNamespace", "dependencyUpdate", "description",
	"devel", "disableCRDHooks", "disableOpenapiValidation", "disableWebhooks", "forceUpdate",
	"keyring", "lint", "maxHistory", "postrender", "recreatePods", "renderSubchartNotes",
	"replace", "repositoryOpts", "resetValues", "reuseValues", "skipAwait", "skipCrds",
	"timeout", "verify", "waitForJobs",
}

// maskedSecret is how a preview's step shows a secret input (its inputs
// are read with secrets masked).
const maskedSecret = "[secret]"

// Complete records in the state dep the program's run inputs (RunKeys) of
// each imported release: from its update step in the preview after the
// import, whose inputs are the program's as the provider checked them.
// Keys the program leaves unset are removed. The release's name,
// namespace, version and values stay as the cluster answered, so a
// difference there still shows as an update. It returns the logical
// names it completed.
func Complete(dep *apitype.DeploymentV3, updates []gate.Step) ([]string, error) {
	var done []string
	for _, u := range updates {
		i := slices.IndexFunc(dep.Resources, func(r apitype.ResourceV3) bool { return string(r.URN) == u.URN && !r.Delete })
		if i < 0 {
			return nil, fmt.Errorf("%s: not in the state after its import", u.Name())
		}
		r := &dep.Resources[i]
		if string(r.Type) != TypeRelease {
			return nil, fmt.Errorf("%s: a %s, not a Helm release", u.Name(), r.Type)
		}
		if r.Outputs == nil {
			r.Outputs = map[string]any{}
		}
		if r.Inputs == nil {
			r.Inputs = map[string]any{}
		}
		for _, k := range RunKeys {
			v, ok := u.Inputs[k]
			if !ok {
				delete(r.Outputs, k)
				delete(r.Inputs, k)
				continue
			}
			if masked(v) {
				return nil, fmt.Errorf("%s: %s is secret in the preview: it cannot be recorded from there", u.Name(), k)
			}
			r.Outputs[k], r.Inputs[k] = v, v
		}
		done = append(done, u.Name())
	}
	return done, nil
}

// masked reports whether v holds a masked secret.
func masked(v any) bool {
	switch v := v.(type) {
	case string:
		return v == maskedSecret
	case map[string]any:
		if _, sig := v[resource.SigKey]; sig {
			return true
		}
		for _, e := range v {
			if masked(e) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, masked)
	}
	return false
}
