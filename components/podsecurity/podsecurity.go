// Package podsecurity names the Kubernetes Pod Security Standards a
// namespace enforces through Pod Security Admission
// (https://kubernetes.io/docs/concepts/security/pod-security-admission/).
// Talos enables the admission plugin with a cluster default of baseline
// (https://www.talos.dev/v1.9/kubernetes-guides/configuration/pod-security/),
// so a namespace whose pods need host paths must say privileged.
package podsecurity

import (
	"github.com/milner/milner/components/vocab"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Modes are the admission modes a namespace label sets: the level is
// enforced, and audited and warned at the same level.
var Modes = []string{"enforce", "audit", "warn"}

// Labels returns the namespace labels that apply level l in every mode.
func Labels(l vocab.PodSecurityLevel) pulumi.StringMap {
	labels := pulumi.StringMap{}
	for _, m := range Modes {
		labels["pod-security.kubernetes.io/"+m] = pulumi.String(string(l))
	}
	return labels
}
