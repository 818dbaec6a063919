package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/stackfile"
)

func init() {
	register("adopt", "record an existing VM's id for a node (imported by the next up) and show the adoption plans no replace", runAdopt)
}

// runAdopt is `milner adopt --stack <name> --node <node> --id <uuid|vmid>`:
// the one thin adoption helper the seeds allow. It records the id in the
// stack file (the program turns it into the Import option), previews, and
// keeps the record only if the preview replaces and deletes nothing.
func runAdopt(args []string) error {
	fs := flag.NewFlagSet("adopt", flag.ContinueOnError)
	eo := engineFlags(fs)
	node := fs.String("node", "", "the node whose VM already exists (required)")
	id := fs.String("id", "", "the VM's id: libvirt domain UUID (virsh domuuid) or Proxmox VM id (required)")
	holder := fs.Bool("holder", false, "Proxmox: the id is the node's disk holder VM (vmId + 1000), recorded as holderAdoptId")
	if err := parseFlags(fs, args, "stack", "node", "id"); err != nil {
		return err
	}
	field := "adoptId"
	if *holder {
		field = "holderAdoptId"
	}
	file := filepath.Join(eo.Repo, "Pulumi."+eo.Stack+".yaml")
	before, err := stackfile.SetNodeField(file, *node, field, *id)
	if err != nil {
		return err
	}
	// Anything but a clean adoption restores the stack file as it was.
	restore := func(cause error) error {
		if werr := os.WriteFile(file, before, 0o644); werr != nil {
			return errors.Join(cause, fmt.Errorf("restore %s: %w", file, werr))
		}
		return cause
	}

	ctx, stop, st, err := openStack(eo)
	if err != nil {
		return restore(err)
	}
	defer stop()
	res, err := st.Preview(ctx, false)
	if err != nil {
		return restore(err)
	}
	report := gate.NewReport(gate.StepsFromEvents(res.Events), clusterName(st.Config()))
	report.Write(os.Stdout)
	var bad []string
	imported := false
	for _, s := range res.Steps {
		switch s.Op {
		case "import":
			imported = true
		case "replace", "create-replacement", "delete-replaced", "delete", "import-replacement":
			bad = append(bad, fmt.Sprintf("%s %s", s.Op, s.URN))
		}
	}
	switch {
	case len(bad) > 0:
		return restore(fmt.Errorf("refused: adopting node %q with id %s would plan %v; the VM's shape differs from the node's config (fix the config or the VM, then adopt again); %s is unchanged", *node, *id, bad, file))
	case !imported:
		fmt.Printf("milner adopt: node %q is already in the state of stack %q; recorded id %s in %s (no import needed)\n", *node, eo.Stack, *id, file)
	default:
		fmt.Printf("milner adopt: node %q will be imported (id %s) by the next `milner up --stack %s`; the preview plans no replace and no delete. Recorded in %s: commit it.\n", *node, *id, eo.Stack, file)
	}
	return nil
}

// clusterName reads milner:cluster.name from a stack's raw config ("" if absent).
func clusterName(cfg map[string]string) string {
	var c struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal([]byte(cfg["milner:cluster"]), &c)
	return c.Name
}
