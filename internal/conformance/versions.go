package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tools/talos-validate/wire"
)

// validatorPrefix names the validator tools in the tools directory:
// talos-validate-<machinery version>, one per machinery version of the
// supported-versions table (config.Validators), built by scripts/tools.sh
// talos-validate. One Go build links one machinery.
const validatorPrefix = "talos-validate-"

// validatorsNeeded names the validators talosAtVersions runs that are not
// in ev.Tools: the generator's and the one of the stack's Talos minor (a
// version outside the table has none; config validation refuses it).
func validatorsNeeded(ev *Evidence) []string {
	need := []string{config.GeneratorMachinery}
	if row, err := config.TalosRow(ev.Config.Cluster.TalosVersion); err == nil {
		need = append(need, row.Validator)
	}
	var missing []string
	for _, v := range slices.Compact(need) {
		if _, err := os.Stat(validatorPath(ev.Tools, v)); err != nil {
			missing = append(missing, validatorPrefix+v)
		}
	}
	return missing
}

// talosAtVersions checks every node config at the versions that matter:
// generated, with Milner's patches, by the provider's machinery
// (config.GeneratorMachinery), and then loaded and validated, as a node
// does with a config it is sent, by the machinery of the stack's Talos
// minor (its row's validator in the supported-versions table). Each
// problem names the version that refuses.
func talosAtVersions(ev *Evidence) []string {
	inputs, err := NodeInputs(ev)
	if err != nil {
		return []string{err.Error()}
	}
	if len(inputs) != len(ev.Config.Nodes) {
		return []string{fmt.Sprintf("%d node configs for %d nodes", len(inputs), len(ev.Config.Nodes))}
	}
	talos := ev.Config.Cluster.TalosVersion
	row, err := config.TalosRow(talos)
	if err != nil {
		return []string{err.Error()}
	}
	var nodes []wire.Node
	for _, name := range slices.Sorted(maps.Keys(inputs)) {
		in := inputs[name]
		nodes = append(nodes, wire.Node{Name: name, ClusterName: in.ClusterName, Endpoint: in.Endpoint,
			KubernetesVersion: in.KubernetesVersion, Contract: in.Contract, MachineType: in.MachineType,
			Patches: in.Patches, Platform: string(in.Platform)})
	}
	generated, err := runValidator(ev.Tools, config.GeneratorMachinery, "generate", nodes)
	if err != nil {
		return []string{err.Error()}
	}
	provider := fmt.Sprintf("machinery %s (the provider's)", config.GeneratorMachinery)
	var problems []string
	for _, n := range generated {
		switch {
		case n.Error != "":
			problems = append(problems, fmt.Sprintf("node %s: %s cannot generate it: %s", n.Name, provider, n.Error))
		case n.Refused != "":
			problems = append(problems, fmt.Sprintf("node %s: %s refuses what it generated: %s", n.Name, provider, n.Refused))
		}
	}
	validated, err := runValidator(ev.Tools, row.Validator, "validate", generated)
	if err != nil {
		return append(problems, err.Error())
	}
	for _, n := range validated {
		why := n.Refused
		if why == "" && n.Error != "" && n.Config != "" {
			why = n.Error
		}
		if why != "" {
			problems = append(problems, fmt.Sprintf("node %s: machinery %s (the nodes run Talos %s) refuses the config %s generated: %s", n.Name, row.Validator, talos, provider, why))
		}
	}
	return problems
}

// validatorPath is the validator of machinery version v in dir.
func validatorPath(dir, v string) string { return filepath.Join(dir, validatorPrefix+v) }

// runValidator runs the validator of machinery version v on nodes.
func runValidator(dir, v, command string, nodes []wire.Node) ([]wire.Node, error) {
	in, err := json.Marshal(nodes)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(validatorPath(dir, v), command)
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
