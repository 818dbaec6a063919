package gate

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/mod/semver"
)

// Refusal is one reason `milner up` must not apply a preview.
type Refusal struct {
	// Resource is the logical name (or node) the refusal is about.
	Resource string
	// Reason says what the preview would do and why that is refused.
	Reason string
	// Instead says what to do instead.
	Instead string
}

func (r Refusal) String() string {
	return fmt.Sprintf("%s: %s; %s", r.Resource, r.Reason, r.Instead)
}

// Check applies the refusal rules to a report. replaceNodes are the nodes
// named with --replace: the node VMs the user asked to recreate. targets
// are the URNs the preview was asked to replace (the engine's
// PlanOptions.Replace): those VMs and, for the explicit recovery `milner up
// --replace <node> --os-disk`, that node's OS volume and Talos config
// apply, whose replace is then not refused. That exception holds only
// beside the node's VM replace, which the --replace rule demands: a lost OS
// disk is recovered with a fresh VM, never swapped under a running one. An
// empty result means the preview may be applied.
//
// The rules: no replace or delete of persistent substrate; no replace of
// anything but a node VM; no delete of a Helm release or of the cluster
// secrets; and the node VMs replaced are exactly the nodes named. A delete
// of a resource retained on delete only drops it from state, so it is
// never refused.
func Check(r Report, replaceNodes, targets []string) []Refusal {
	var out []Refusal
	teardown := fmt.Sprintf("this would destroy data; for a full teardown use `milner teardown --stack %s`", r.Stack)
	// Nothing but a node VM is replaced; persistent substrate least of all.
	for _, l := range Layers {
		if l == Disposable {
			continue
		}
		for _, c := range r.Delta(l).Of(Replace) {
			if slices.Contains(targets, c.URN) {
				continue
			}
			reason := fmt.Sprintf("%s would be replaced (forced by %s); only node VMs are ever replaced", c.Type, keys(c))
			instead := "revert the change to " + keys(c) + " or make it an in-place update"
			if l == Persistent {
				reason = fmt.Sprintf("%s is persistent substrate and would be replaced (forced by %s)", c.Type, keys(c))
				instead = "revert the change to " + keys(c) + "; " + teardown
			}
			out = append(out, Refusal{c.Name, reason, instead})
		}
	}
	for _, c := range r.Delta(Persistent).Of(Delete) {
		if c.Retained {
			continue // e.g. an old boot image: it leaves state and stays.
		}
		out = append(out, Refusal{c.Name,
			fmt.Sprintf("%s is persistent substrate and would be deleted", c.Type),
			"restore it in the stack config; " + teardown})
	}

	for _, c := range r.Delta(Apps).Of(Delete) {
		if c.Type == TypeHelmRelease && !c.Retained {
			out = append(out, Refusal{c.Name,
				"the Helm release would be deleted with its workloads",
				"keep the app in milner:apps (rename it with previousNames), or set retainOnDelete before removing it"})
		}
	}
	for _, c := range r.Delta(Talos).Of(Delete) {
		if c.Type == TypeTalosSecrets {
			out = append(out, Refusal{c.Name,
				"the cluster secrets would be deleted; without them no node can be managed again",
				"restore the cluster in the stack config; to remove the whole cluster use `milner teardown --stack " + r.Stack + "`"})
		}
	}

	vmReplaced := map[string]bool{}
	for _, c := range r.Delta(Disposable).Of(Replace) {
		vmReplaced[c.Node] = true
	}
	for _, c := range r.Delta(Talos).Of(Update) {
		// A node whose VM is replaced is judged by the VM rules below.
		if c.Type != TypeConfigApply || vmReplaced[c.Node] || !slices.ContainsFunc(c.Diffs, isAddressProp) {
			continue
		}
		out = append(out, Refusal{c.Name,
			fmt.Sprintf("node %s's address would change: the apply dials the new address, which the node takes only from this very apply (a provider timeout, then a failed up)", c.Node),
			fmt.Sprintf("move it in two steps: (1) add the new address to the running node, `talosctl -n <old address> patch machineconfig` adding <new address>/<prefix> to machine.network.interfaces[0].addresses; (2) set the new address in milner:nodes and run `milner up --stack %s`, which dials it and drops the old one; or revert the address", r.Stack)})
	}

	var replaced []string
	for _, c := range r.Delta(Disposable).Of(Replace) {
		replaced = append(replaced, c.Node)
		if !slices.Contains(replaceNodes, c.Node) {
			out = append(out, Refusal{c.Name,
				fmt.Sprintf("the VM of node %s would be replaced (forced by %s) but --replace does not name it", c.Node, keys(c)),
				fmt.Sprintf("if the node is meant to be recreated run `milner up --stack %s --replace %s`; otherwise revert the change to %s", r.Stack, c.Node, keys(c))})
		}
	}
	for _, n := range replaceNodes {
		if !slices.Contains(replaced, n) {
			out = append(out, Refusal{n,
				"named in --replace but the preview does not replace its VM",
				"check the node name against docs/stacks.md and name exactly the nodes to recreate"})
		}
	}
	return out
}

// isAddressProp reports a ConfigurationApply property that holds the
// address the provider dials.
func isAddressProp(p string) bool { return p == "node" || p == "endpoint" }

// CheckContract refuses a change of the Talos machine-config contract:
// recorded is the contract the cluster's secrets bundle was created with
// (its talosVersion input in state, e.g. v1.9 or v1.9.5), declared is
// milner:cluster.configContract. Upstream keeps the contract fixed at the
// version the cluster was created with: a new contract changes defaults
// in every node's config at once. allow is the operator's explicit consent.
func CheckContract(recorded, declared string, allow bool) []Refusal {
	if recorded == "" || allow || contractOf(recorded) == contractOf(declared) {
		return nil
	}
	return []Refusal{{"milner:cluster.configContract",
		fmt.Sprintf("%s would change the machine-config contract the cluster was created with (%s) in every node's config", declared, contractOf(recorded)),
		fmt.Sprintf("set configContract back to %s (to run a newer Talos, change talosVersion and run `milner upgrade`); to change the contract deliberately, run `milner up --allow-contract-change`", contractOf(recorded))}}
}

// contractOf is the vMAJOR.MINOR of a Talos version or contract.
func contractOf(v string) string {
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return semver.MajorMinor(v)
}

// keys names the properties forcing a replace.
func keys(c Change) string {
	switch {
	case len(c.Keys) > 0:
		return strings.Join(c.Keys, ", ")
	case len(c.Diffs) > 0:
		return strings.Join(c.Diffs, ", ")
	default:
		return "an explicit replace"
	}
}
