package gate

import (
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// step builds a preview step of a resource at the stack root (the secrets
// bundle) or under the substrate component.
func step(op apitype.OpType, typ, name string) Step {
	parent := ""
	if typ == TypeLibvirtDomain {
		parent = "milner:components:LibvirtSubstrate$"
	}
	return Step{Op: op, Type: typ, URN: "urn:pulumi:dev::milner::" + parent + typ + "::" + name}
}

func TestSecretsBundleIsNeverCreatedBesideExistingNodes(t *testing.T) {
	create := step(apitype.OpCreate, TypeTalosSecrets, "c-secrets")
	waiting := func(vm string) bool { return vm == "c-w-1" } // w-1 answers in maintenance mode
	for _, tc := range []struct {
		name   string
		steps  []Step
		live   []string
		refuse string // "" when the preview may go on
	}{
		{"clean install", []Step{create, step(apitype.OpCreate, TypeLibvirtDomain, "c-cp-1"), step(apitype.OpCreate, TypeConfigApply, "cp-1-apply")}, nil, ""},
		{"bundle kept", []Step{step(apitype.OpSame, TypeTalosSecrets, "c-secrets"), step(apitype.OpSame, TypeLibvirtDomain, "c-cp-1")}, nil, ""},
		{"bundle imported after state loss", []Step{step(apitype.OpImport, TypeTalosSecrets, "c-secrets"), step(apitype.OpImport, TypeLibvirtDomain, "c-cp-1")}, nil, ""},
		{"node VM in state", []Step{create, step(apitype.OpSame, TypeLibvirtDomain, "c-cp-1")}, nil, "c-cp-1 (same)"},
		{"node VM being replaced", []Step{create, step(apitype.OpReplace, TypeLibvirtDomain, "c-cp-1")}, nil, "c-cp-1 (replace)"},
		{"talos config in state", []Step{create, step(apitype.OpUpdate, TypeConfigApply, "cp-1-apply")}, nil, "cp-1-apply (update)"},
		{"node VM being adopted", []Step{create, step(apitype.OpImport, TypeLibvirtDomain, "c-cp-2")}, nil, "c-cp-2 (import)"},
		{"node live on the host, state empty", []Step{create, step(apitype.OpCreate, TypeLibvirtDomain, "c-cp-1")}, []string{"c-cp-1"}, "c-cp-1 (live)"},
		// A staged bring-up: the VMs in state and live, all waiting in
		// maintenance mode for their first config.
		{"node VM waiting in maintenance mode", []Step{create, step(apitype.OpSame, TypeLibvirtDomain, "c-w-1"), step(apitype.OpCreate, TypeConfigApply, "w-1-apply")}, []string{"c-w-1"}, ""},
		{"one waiting, one not", []Step{create, step(apitype.OpSame, TypeLibvirtDomain, "c-w-1"), step(apitype.OpSame, TypeLibvirtDomain, "c-cp-1")}, nil, "c-cp-1 (same)"},
		{"a waiting node's config in state", []Step{create, step(apitype.OpSame, TypeLibvirtDomain, "c-w-1"), step(apitype.OpUpdate, TypeConfigApply, "w-1-apply")}, nil, "w-1-apply (update)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckSecretsBundle(tc.steps, tc.live, waiting, "dev")
			if tc.refuse == "" {
				if len(got) > 0 {
					t.Fatalf("refused: %v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Resource != "c-secrets" || !strings.Contains(got[0].Reason, tc.refuse) {
				t.Fatalf("got %v, want one refusal of c-secrets naming %q", got, tc.refuse)
			}
			if !strings.Contains(got[0].Instead, "milner secrets import --stack dev") {
				t.Errorf("instead: %s", got[0].Instead)
			}
		})
	}
}

func TestSecondBootstrapIsRefusedOnEtcdEvidence(t *testing.T) {
	create := step(apitype.OpCreate, TypeTalosBootstrap, "c-bootstrap")
	for _, tc := range []struct {
		name         string
		steps        []Step
		bootstrapped bool
		refuse       bool
	}{
		{"clean install", []Step{create, step(apitype.OpCreate, TypeLibvirtDomain, "c-cp-1"), step(apitype.OpCreate, TypeConfigApply, "cp-1-apply")}, true, false},
		{"adopted nodes, etcd lists members", []Step{create, step(apitype.OpImport, TypeLibvirtDomain, "c-cp-1")}, true, true},
		{"nodes in state, etcd lists members", []Step{create, step(apitype.OpSame, TypeLibvirtDomain, "c-cp-1"), step(apitype.OpUpdate, TypeConfigApply, "cp-1-apply")}, true, true},
		{"adopted VMs of a cluster that never was", []Step{create, step(apitype.OpImport, TypeLibvirtDomain, "c-cp-1")}, false, false},
		{"bootstrap recorded", []Step{step(apitype.OpImport, TypeTalosBootstrap, "c-bootstrap"), step(apitype.OpImport, TypeLibvirtDomain, "c-cp-1")}, true, false},
		{"new bundle too: the secrets rule speaks", []Step{create, step(apitype.OpCreate, TypeTalosSecrets, "c-secrets"), step(apitype.OpImport, TypeLibvirtDomain, "c-cp-1")}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckBootstrap(tc.steps, tc.bootstrapped, `control plane "cp-1" lists 3 etcd members`, "dev")
			if !tc.refuse {
				if len(got) > 0 {
					t.Fatalf("refused: %v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Resource != "c-bootstrap" || !strings.Contains(got[0].Reason, "lists 3 etcd members") || !strings.Contains(got[0].Instead, "milner adopt --stack dev --bootstrap") {
				t.Fatalf("got %v, want one refusal of c-bootstrap with the evidence and the adopt command", got)
			}
		})
	}
}
