// Package appsadopt takes back, after a lost state, the apps layer a
// cluster already runs: each Helm release, each HelmApp's Namespace and
// Secrets, the workloads' Namespace, ResourceQuota, LimitRange and
// PriorityClass, the storage class and the OIDC bindings, by import
// (`milner adopt --all`, docs/runbooks/recover.md).
//
// What the stack declares is what its preview declares (the creates of
// its Kubernetes objects, Declared); what is adopted is what the cluster
// answers it holds under the declared name and namespace, and for a
// release under the declared chart (Decide): never a guess. A release of
// the same name from another chart is refused, naming both charts.
//
// The import is one-shot and happens here, under Milner's stack lock
// (Run), not in the next up: the Kubernetes provider's import of a
// helm.sh/v3 Release reads back the release's name, namespace, chart name,
// version and values, but none of the inputs that only say how Helm runs
// (atomic, timeout, repositoryOpts, ...; Complete), so an up that imported
// it would diff those and run a Helm upgrade of every release. Run imports
// with everything but the components untargeted (the engine imports and
// then keeps the read state: no update step), records the program's own
// run inputs in the imported releases' state, and previews again: a
// release whose live chart version or values differ from the stack shows
// as an update of it, never as a create or a replace.
package appsadopt

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/sig"
	"go.yaml.in/yaml/v3"

	"github.com/milner/milner/internal/gate"
)

// The Kubernetes provider's type tokens of the objects the apps layer
// declares (stacks/apps.go, storage.go, oidc.go; components/helmapp,
// components/workloads).
const (
	TypeNamespace          = "kubernetes:core/v1:Namespace"
	TypeSecret             = "kubernetes:core/v1:Secret"
	TypeResourceQuota      = "kubernetes:core/v1:ResourceQuota"
	TypeLimitRange         = "kubernetes:core/v1:LimitRange"
	TypePriorityClass      = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
	TypeStorageClass       = "kubernetes:storage.k8s.io/v1:StorageClass"
	TypeClusterRoleBinding = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
	TypeRelease            = "kubernetes:helm.sh/v3:Release"
)

// namespaced says, per adoptable type, whether its objects live in a
// namespace.
var namespaced = map[string]bool{
	TypeNamespace: false, TypeSecret: true, TypeResourceQuota: true, TypeLimitRange: true,
	TypePriorityClass: false, TypeStorageClass: false, TypeClusterRoleBinding: false, TypeRelease: true,
}

// componentPrefix starts the type token of every Milner component
// (helmapp.Type, workloads.Type).
const componentPrefix = "milner:components:"

// Object is one Kubernetes object the stack declares and its state lacks.
type Object struct {
	// URN is the object's URN in the stack.
	URN string
	// Type is its type token.
	Type string
	// Namespace is its namespace; "" for a cluster-scoped object.
	Namespace string
	// Name is its name in the cluster (a release's release name).
	Name string
	// Chart and Version are a release's declared chart name (as its
	// Chart.yaml names it, and Helm records it) and resolved version.
	Chart, Version string
}

// Logical is the object's logical name (a state contract, stacks/program.go).
func (o Object) Logical() string { return gate.Step{URN: o.URN}.Name() }

// ImportID is the id the Kubernetes provider imports the object by:
// "<namespace>/<name>", or "<name>" when cluster-scoped. The provider's
// Read parses it with parseFqName (pulumi-kubernetes provider/v4
// v4.0.0-20260115033456-f47bc2d6f199 pkg/provider/util.go), a Release's
// too (helm_release.go Read: "Starting import for %s/%s").
func (o Object) ImportID() string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

// String names the object as messages do.
func (o Object) String() string {
	kind := o.Type[strings.LastIndex(o.Type, ":")+1:]
	return fmt.Sprintf("%s %s (%s)", kind, o.ImportID(), o.Logical())
}

// Declared returns the Kubernetes objects the preview creates, in step
// order: what the stack declares and its state lacks. projectDir is where
// a local chart's path is read from (its Chart.yaml names the chart).
func Declared(steps []gate.Step, projectDir string) ([]Object, error) {
	// A child's namespace is its component's Namespace's name (an output:
	// unknown in a preview when the namespace is created too).
	nsOf := map[string]string{} // component logical name -> namespace
	for _, s := range steps {
		if s.Type == TypeNamespace && s.Op == apitype.OpCreate {
			n, _ := metadata(s.Inputs, "name")
			if _, ok := known(n); ok {
				nsOf[strings.TrimSuffix(s.Name(), "-ns")] = n
			}
		}
	}
	var out []Object
	var problems []string
	for _, s := range steps {
		isNS, ok := namespaced[s.Type]
		if !ok || s.Op != apitype.OpCreate {
			continue
		}
		o := Object{URN: s.URN, Type: s.Type}
		if s.Type == TypeRelease {
			o.Name, _ = s.Inputs["name"].(string)
			o.Namespace, _ = s.Inputs["namespace"].(string)
			o.Version, _ = s.Inputs["version"].(string)
			chart, err := chartName(s.Inputs, projectDir)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", s.Name(), err))
				continue
			}
			o.Chart = chart
		} else {
			o.Name, _ = metadata(s.Inputs, "name")
			o.Namespace, _ = metadata(s.Inputs, "namespace")
		}
		if !isNS {
			o.Namespace = ""
		} else if _, ok := known(o.Namespace); !ok {
			o.Namespace = componentNamespace(nsOf, s.Name())
		}
		if _, ok := known(o.Name); !ok || (isNS && o.Namespace == "") {
			problems = append(problems, fmt.Sprintf("%s: the preview does not say its name and namespace", s.Name()))
			continue
		}
		out = append(out, o)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("the apps layer's preview: %s", strings.Join(problems, "; "))
	}
	return out, nil
}

// componentNamespace is the namespace of the component whose child is
// named child ("<component>-<suffix>"), "" when none is known: the longest
// component name that prefixes it.
func componentNamespace(nsOf map[string]string, child string) string {
	best, ns := "", ""
	for comp, n := range nsOf {
		if strings.HasPrefix(child, comp+"-") && len(comp) > len(best) {
			best, ns = comp, n
		}
	}
	return ns
}

// known returns v when it is a string the preview knows (not the engine's
// unknown sentinel).
func known(v string) (string, bool) {
	return v, v != "" && v != sig.UnknownStringValue
}

// metadata reads metadata.<key> of an object's inputs.
func metadata(inputs map[string]any, key string) (string, bool) {
	m, _ := inputs["metadata"].(map[string]any)
	v, ok := m[key].(string)
	return v, ok
}

// chartName is the name a release's chart input gives the chart, as Helm
// records it (chart.metadata.name): an OCI reference's last element, a
// repository chart's name, or a local chart's Chart.yaml name.
func chartName(inputs map[string]any, projectDir string) (string, error) {
	chart, _ := inputs["chart"].(string)
	switch _, repo := inputs["repositoryOpts"].(map[string]any); {
	case chart == "":
		return "", fmt.Errorf("no chart in the preview")
	case strings.HasPrefix(chart, "oci://"):
		return path.Base(chart), nil
	case repo:
		return chart, nil
	}
	// A local chart (helmapp.Chart.Path): the provider loads a directory
	// holding Chart.yaml, relative to the project directory.
	b, err := os.ReadFile(filepath.Join(projectDir, chart, "Chart.yaml"))
	if err != nil {
		return "", fmt.Errorf("local chart %s: %w", chart, err)
	}
	var meta struct {
		Name string `yaml:"name"`
	}
	if err := yaml.Unmarshal(b, &meta); err != nil || meta.Name == "" {
		return "", fmt.Errorf("local chart %s: Chart.yaml names no chart", chart)
	}
	return meta.Name, nil
}

// components are the URNs of the Milner components the preview creates:
// what the one-shot import targets (state-only records; every object
// under them is then untargeted, so it is imported when adopted and
// skipped otherwise).
func components(steps []gate.Step) []string {
	var out []string
	for _, s := range steps {
		if strings.HasPrefix(s.Type, componentPrefix) && s.Op == apitype.OpCreate {
			out = append(out, s.URN)
		}
	}
	return out
}
