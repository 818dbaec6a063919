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
func CheckSecretsBundle(steps []Step, liveNodes []string, stack string) []Refusal {
	var creates []string
	var existing []string
	for _, s := range steps {
		switch {
		case s.Type == TypeTalosSecrets && s.Op == apitype.OpCreate:
			creates = append(creates, s.Name())
		case isNodeType(s) && s.Op != apitype.OpCreate && s.Op != apitype.OpCreateReplacement:
			existing = append(existing, fmt.Sprintf("%s (%s)", s.Name(), s.Op))
		}
	}
	if len(creates) == 0 {
		return nil
	}
	for _, n := range liveNodes {
		existing = append(existing, n+" (live)")
	}
	if len(existing) == 0 {
		return nil // a clean install: no node trusts any CA yet.
	}
	var out []Refusal
	for _, c := range creates {
		out = append(out, Refusal{c,
			fmt.Sprintf("a new cluster secrets bundle (a new CA) would be created while nodes exist: %s; they trust only the bundle they were configured with, so the cluster would become unmanageable", strings.Join(existing, ", ")),
			fmt.Sprintf("import the exported bundle first: `milner secrets import --stack %s --in <bundle.age> --identity <key.txt>`; or restore the state (docs/runbooks/recover.md)", stack)})
	}
	return out
}

// isNodeType reports whether a step is about a node: its VM (not a Proxmox
// disk holder) or its Talos configuration.
func isNodeType(s Step) bool {
	switch LayerOf(s.Type, s.Name()) {
	case Disposable:
		return true
	}
	return s.Type == TypeConfigApply
}
