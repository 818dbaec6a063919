package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/milner/milner/tools/talos-validate/wire"
)

// ProviderMachinery is the machinery the Talos provider generates node
// configs with: terraform-provider-talos v0.10.1 (the provider pulumi-talos
// v0.7.1 wraps) requires github.com/siderolabs/talos/pkg/machinery v1.12.0
// in its go.mod.
const ProviderMachinery = "v1.12.0"

// validatorPrefix names the validator tools in the tools directory:
// talos-validate-<machinery version> (tools/talos-validate-v*, built by
// scripts/tools.sh talos-validate). One Go build links one machinery.
const validatorPrefix = "talos-validate-"

// talosAtVersions checks every node config at the versions that matter:
// generated, with Milner's patches, by the provider's machinery
// (ProviderMachinery), and then loaded and validated, as a node does with
// a config it is sent, by the machinery of the stack's talosVersion (the
// validator of the same minor in ev.Tools). Each problem names the version
// that refuses.
func talosAtVersions(ev *Evidence) []string {
	inputs, err := NodeInputs(ev)
	if err != nil {
		return []string{err.Error()}
	}
	if len(inputs) != len(ev.Config.Nodes) {
		return []string{fmt.Sprintf("%d node configs for %d nodes", len(inputs), len(ev.Config.Nodes))}
	}
	have := validators(ev.Tools)
	if !slices.Contains(have, ProviderMachinery) {
		return []string{fmt.Sprintf("no validator for the provider's machinery %s in %q: run scripts/tools.sh talos-validate", ProviderMachinery, ev.Tools)}
	}
	var nodes []wire.Node
	for _, name := range slices.Sorted(maps.Keys(inputs)) {
		in := inputs[name]
		nodes = append(nodes, wire.Node{Name: name, ClusterName: in.ClusterName, Endpoint: in.Endpoint,
			KubernetesVersion: in.KubernetesVersion, Contract: in.Contract, MachineType: in.MachineType,
			Patches: in.Patches, Platform: string(in.Platform)})
	}
	generated, err := runValidator(ev.Tools, ProviderMachinery, "generate", nodes)
	if err != nil {
		return []string{err.Error()}
	}
	provider := fmt.Sprintf("machinery %s (the provider's)", ProviderMachinery)
	var problems []string
	for _, n := range generated {
		switch {
		case n.Error != "":
			problems = append(problems, fmt.Sprintf("node %s: %s cannot generate it: %s", n.Name, provider, n.Error))
		case n.Refused != "":
			problems = append(problems, fmt.Sprintf("node %s: %s refuses what it generated: %s", n.Name, provider, n.Refused))
		}
	}
	talos := ev.Config.Cluster.TalosVersion
	nodesRun := ""
	for _, v := range have {
		if semver.MajorMinor(v) == semver.MajorMinor(talos) {
			nodesRun = v
		}
	}
	if nodesRun == "" {
		return append(problems, fmt.Sprintf("no validator for Talos %s (the stack's talosVersion %s) in %q, only for %s: what the nodes accept is not checked; add a tools/%s%s.x module",
			semver.MajorMinor(talos), talos, ev.Tools, strings.Join(have, ", "), validatorPrefix, semver.MajorMinor(talos)))
	}
	validated, err := runValidator(ev.Tools, nodesRun, "validate", generated)
	if err != nil {
		return append(problems, err.Error())
	}
	for _, n := range validated {
		why := n.Refused
		if why == "" && n.Error != "" && n.Config != "" {
			why = n.Error
		}
		if why != "" {
			problems = append(problems, fmt.Sprintf("node %s: machinery %s (the nodes run Talos %s) refuses the config %s generated: %s", n.Name, nodesRun, talos, provider, why))
		}
	}
	return problems
}

// validators are the machinery versions of the validator tools in dir.
func validators(dir string) []string {
	if dir == "" {
		return nil
	}
	paths, _ := filepath.Glob(filepath.Join(dir, validatorPrefix+"v*"))
	var out []string
	for _, p := range paths {
		out = append(out, strings.TrimPrefix(filepath.Base(p), validatorPrefix))
	}
	semver.Sort(out)
	return out
}

// runValidator runs the validator of machinery version v on nodes.
func runValidator(dir, v, command string, nodes []wire.Node) ([]wire.Node, error) {
	in, err := json.Marshal(nodes)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(dir, validatorPrefix+v), command)
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stderr = bytes.NewReader(in), &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s%s %s: %w: %s", validatorPrefix, v, command, err, strings.TrimSpace(stderr.String()))
	}
	var got []wire.Node
	if err := json.Unmarshal(out, &got); err != nil {
		return nil, fmt.Errorf("%s%s %s: %w", validatorPrefix, v, command, err)
	}
	return got, nil
}
