package gate

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// CheckSecretsBundle refuses a preview that creates a cluster secrets
// bundle while any node of the cluster exists: in state (a node VM or a
// Talos configuration with any step but a create), being imported (an
// adoption), or live on the substrate (liveNodes: node VMs the host runs
// under this cluster's names, from the guard's inventory). Running nodes
// trust only the CA of the bundle they were configured with; a new bundle
// cannot manage them (the state-loss failure of issue #14). steps are every
// step of the preview, "same" included.
//
// A node VM for which waiting answers true holds no config at all (it
// answers the Talos API in maintenance mode), so it trusts no CA and does
// not count: a staged bring-up (stopAfter: substrate, then the Talos layer)
// creates the bundle beside VMs waiting for their first config. waiting is
// asked only when the preview creates a bundle beside node VMs; nil asks
// nothing. A Talos configuration in state always counts.
func CheckSecretsBundle(steps []Step, liveNodes []string, waiting func(vm string) bool, stack string) []Refusal {
	var creates []string
	type node struct {
		name, how string
		vm        bool
	}
	var nodes []node
	for _, s := range steps {
		switch {
		case s.Type == TypeTalosSecrets && s.Op == apitype.OpCreate:
			creates = append(creates, s.Name())
		case isNodeType(s) && s.Op != apitype.OpCreate && s.Op != apitype.OpCreateReplacement:
			nodes = append(nodes, node{s.Name(), string(s.Op), s.Type != TypeConfigApply})
		}
	}
	if len(creates) == 0 {
		return nil
	}
	for _, n := range liveNodes {
		nodes = append(nodes, node{n, "live", true})
	}
	asked := map[string]bool{}
	var existing []string
	for _, n := range nodes {
		if n.vm && waiting != nil {
			w, ok := asked[n.name]
			if !ok {
				w = waiting(n.name)
				asked[n.name] = w
			}
			if w {
				continue
			}
		}
		existing = append(existing, fmt.Sprintf("%s (%s)", n.name, n.how))
	}
	if len(existing) == 0 {
		return nil // a clean install: no node trusts any CA yet.
	}
	var out []Refusal
	for _, c := range creates {
		out = append(out, Refusal{c,
			fmt.Sprintf("a new cluster secrets bundle (a new CA) would be created while nodes exist that are not waiting in maintenance mode: %s; they trust only the bundle they were configured with, so the cluster would become unmanageable", strings.Join(existing, ", ")),
			fmt.Sprintf("import the exported bundle first: `milner secrets import --stack %s --in <bundle.age> --identity <key.txt>`; or restore the state (docs/runbooks/recover.md)", stack)})
	}
	return out
}

// isNodeType reports whether a step is about a node: its VM (not a Proxmox
// disk holder) or its Talos configuration.
func isNodeType(s Step) bool {
	return LayerOf(s.Type, s.Name()) == Disposable || s.Type == TypeConfigApply
}

// BootstrapNeedsAsking reports whether a preview creates the cluster's
// bootstrap beside nodes it does not create (in state, replaced or being
// imported) and keeps the secrets bundle: only then can the bootstrap be a
// second one, and the control planes are asked (CheckBootstrap). A preview
// that creates a bundle beside nodes is refused by CheckSecretsBundle.
func BootstrapNeedsAsking(steps []Step) bool {
	creates, existing := false, false
	for _, s := range steps {
		switch {
		case s.Type == TypeTalosSecrets && s.Op == apitype.OpCreate:
			return false
		case s.Type == TypeTalosBootstrap && s.Op == apitype.OpCreate:
			creates = true
		case isNodeType(s) && s.Op != apitype.OpCreate:
			existing = true
		}
	}
	return creates && existing
}

// CheckBootstrap refuses a preview that creates the bootstrap of a cluster
// whose control planes list etcd members (bootstrapped, with the evidence):
// Talos answers a second bootstrap AlreadyExists "etcd data directory is
// not empty" (machined v1alpha1_server.go), which terraform-provider-talos
// v0.10.1 retries until its timeout, failing the up before the health gate
// and the apps.
func CheckBootstrap(steps []Step, bootstrapped bool, evidence, stack string) []Refusal {
	if !bootstrapped || !BootstrapNeedsAsking(steps) {
		return nil
	}
	var out []Refusal
	for _, s := range steps {
		if s.Type == TypeTalosBootstrap && s.Op == apitype.OpCreate {
			out = append(out, Refusal{s.Name(),
				fmt.Sprintf("the cluster's etcd would be bootstrapped again, but it is bootstrapped: %s; Talos refuses a second bootstrap", evidence),
				fmt.Sprintf("record it: `milner adopt --stack %s --bootstrap`", stack)})
		}
	}
	return out
}
