package stacks

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	rbacv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/rbac/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/stacks/config"
)

// The issuer CA's way into the kube-apiserver pod, live. Talos applies a
// change of .cluster without a reboot, but not one of machine.files
// (talos v1.9.5 internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go,
// CanApplyImmediate: ".cluster" is in the list, .machine.files is not, and
// any other v1alpha1 difference stages the apply under
// staged_if_needing_reboot until a reboot Milner never makes). So the CA is
// not a machine file: it is a TrustedRootsConfig document, which
// CanApplyImmediate does not compare at all (it diffs RawV1Alpha1 only) and
// which secrets.TrustedRootsController writes, live, into the host's
// /etc/ssl/certs/ca-certificates.crt after Talos' bundled roots
// (internal/app/machined/pkg/controllers/secrets/trusted_roots.go;
// constants.DefaultTrustedCAFile in machinery v1.9.5). The kube-apiserver
// pod does not mount that file (control_plane_static_pod.go mounts only its
// secrets, config and audit directories and cluster.apiServer.extraVolumes),
// so a .cluster extraVolume mounts it read-only, and --oidc-ca-file names
// it. The mount path carries the CA's digest: kube-apiserver reads the CA
// file once, at start (k8s.io/kubernetes pkg/kubeapiserver/options/
// authentication.go, os.ReadFile of OIDC.CAFile), and a new digest changes
// the pod's flags and volume, so Talos rewrites the static pod and the
// kubelet restarts the API server with the new CA.
const (
	// hostTrustedRoots is the host file Talos writes trusted roots into.
	hostTrustedRoots = "/etc/ssl/certs/ca-certificates.crt"
	// oidcCADir is where the API server pod sees it.
	oidcCADir = "/etc/kubernetes/oidc"
	// OIDCTrustedRootsName is the TrustedRootsConfig document's name.
	OIDCTrustedRootsName = "milner-oidc-issuer"
)

// OIDCAPIServerArgs are the kube-apiserver flags (without "--") of
// milner:cluster.oidc, nil without it. Talos v1.9's machinery has no field
// for the structured authentication configuration, and the --oidc-* flags
// and --authentication-config exclude each other (authentication.go:
// "authentication-config file and oidc-* flags are mutually exclusive").
func OIDCAPIServerArgs(o *config.OIDCConfig) map[string]string {
	if o == nil {
		return nil
	}
	args := map[string]string{
		"oidc-issuer-url":      o.IssuerURL,
		"oidc-client-id":       o.ClientID,
		"oidc-username-claim":  o.UsernameClaim,
		"oidc-username-prefix": *o.UsernamePrefix,
		"oidc-groups-claim":    o.GroupsClaim,
		"oidc-groups-prefix":   *o.GroupsPrefix,
	}
	if o.IssuerCA != "" {
		args["oidc-ca-file"] = oidcCAPath(o.IssuerCA)
	}
	return args
}

// oidcCAPath is the CA file inside the API server pod, named by the CA's digest.
func oidcCAPath(ca string) string {
	sum := sha256.Sum256([]byte(ca))
	return fmt.Sprintf("%s/ca-%s.crt", oidcCADir, hex.EncodeToString(sum[:6]))
}

// oidcPatches are the control planes' patches of milner:cluster.oidc: the
// API server's flags (and with an issuer CA its mount) under .cluster, and
// the CA as a TrustedRootsConfig document. Every change they make applies
// live (see above); the API server restarts as its static pod changes.
func oidcPatches(o *config.OIDCConfig) ([]string, error) {
	if o == nil {
		return nil, nil
	}
	apiServer := map[string]any{"extraArgs": OIDCAPIServerArgs(o)}
	if o.IssuerCA != "" {
		apiServer["extraVolumes"] = []any{map[string]any{
			"hostPath": hostTrustedRoots, "mountPath": oidcCAPath(o.IssuerCA), "readonly": true,
		}}
	}
	b, err := json.Marshal(map[string]any{"cluster": map[string]any{"apiServer": apiServer}})
	if err != nil {
		return nil, err
	}
	out := []string{string(b)}
	if o.IssuerCA != "" {
		// A document of its own kind: a patch adds it (JSON is YAML).
		doc, err := json.Marshal(map[string]any{
			"apiVersion": "v1alpha1", "kind": "TrustedRootsConfig",
			"name": OIDCTrustedRootsName, "certificates": o.IssuerCA,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, string(doc))
	}
	return out, nil
}

// deployOIDCBindings binds each group of milner:cluster.oidc.groupBindings,
// with its prefix, to its ClusterRole: Milner-owned objects (a group
// removed from config is a binding deleted), named OIDCBindingName.
func deployOIDCBindings(ctx *pulumi.Context, cfg *config.Config, k8s *kubernetes.Provider) ([]*rbacv1.ClusterRoleBinding, error) {
	o := cfg.Cluster.OIDC
	if o == nil {
		return nil, nil
	}
	var out []*rbacv1.ClusterRoleBinding
	for _, group := range slices.Sorted(maps.Keys(o.GroupBindings)) {
		name := config.OIDCBindingName(group)
		crb, err := rbacv1.NewClusterRoleBinding(ctx, name, &rbacv1.ClusterRoleBindingArgs{
			Metadata: &metav1.ObjectMetaArgs{
				Name:   pulumi.String(name),
				Labels: pulumi.StringMap{"app.kubernetes.io/managed-by": pulumi.String("milner")},
			},
			RoleRef: &rbacv1.RoleRefArgs{
				ApiGroup: pulumi.String("rbac.authorization.k8s.io"),
				Kind:     pulumi.String("ClusterRole"),
				Name:     pulumi.String(o.GroupBindings[group]),
			},
			Subjects: rbacv1.SubjectArray{&rbacv1.SubjectArgs{
				ApiGroup: pulumi.String("rbac.authorization.k8s.io"),
				Kind:     pulumi.String("Group"),
				Name:     pulumi.String(*o.GroupsPrefix + group),
			}},
		}, pulumi.Provider(k8s))
		if err != nil {
			return nil, fmt.Errorf("apps %q: oidc binding %q: %w", cfg.Cluster.Name, group, err)
		}
		out = append(out, crb)
	}
	return out, nil
}
