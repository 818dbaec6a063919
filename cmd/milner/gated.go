package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/stacks"
)

// nodeVMTypes are the type tokens of node VMs; --replace targets one of them.
var nodeVMTypes = map[string]bool{gate.TypeLibvirtDomain: true, gate.TypeProxmoxVM: true}

// replaceTargets maps the nodes named with --replace to the URNs of their
// VMs in state ("<cluster>-<node>"). A node that is not in state is an error:
// there is nothing to replace.
func replaceTargets(resources []engine.Resource, cluster string, nodes []string) ([]string, error) {
	var urns []string
	for _, n := range nodes {
		want := cluster + "-" + n
		found := ""
		for _, r := range resources {
			if nodeVMTypes[r.Type] && r.URN[strings.LastIndex(r.URN, "::")+2:] == want {
				found = r.URN
			}
		}
		if found == "" {
			return nil, fmt.Errorf("refused: --replace %s: the state has no VM %q for that node; name a node of this stack (see docs/stacks.md)", n, want)
		}
		urns = append(urns, found)
	}
	return urns, nil
}

// guardSubstrate refuses an up that would recreate or duplicate live
// substrate objects: empty state while the machines live, or orphans. It
// reads the libvirt host or the Proxmox API named by the stack's config.
func guardSubstrate(ctx context.Context, st *engine.Stack) error {
	cfg := st.Config()
	var sub stacks.SubstrateConfig
	if err := json.Unmarshal([]byte(cfg["milner:substrate"]), &sub); err != nil {
		return nil
	}
	if sub.Kind == "proxmox" {
		return guardProxmox(ctx, st)
	}
	if sub.Kind != "libvirt" {
		return nil
	}
	uri := stacks.DefaultLibvirtURI
	if sub.Libvirt != nil && sub.Libvirt.URI != "" {
		uri = sub.Libvirt.URI
	}
	declared, err := guard.DeclaredLibvirt(st.Name(), cfg)
	if err != nil {
		return err
	}
	resources, err := st.Resources(ctx)
	if err != nil {
		return err
	}
	inState := map[string]bool{}
	for _, r := range resources {
		inState[r.Type+"::"+r.URN[strings.LastIndex(r.URN, "::")+2:]] = true
	}
	live, err := guard.ListLibvirt(uri)
	if err != nil {
		return err
	}
	findings := guard.Check(st.Name(), declared, func(typ, logical string) bool { return inState[typ+"::"+logical] }, live)
	if len(findings) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "milner: refused before touching anything (%d problems):\n", len(findings))
	for _, f := range findings {
		fmt.Fprintf(os.Stderr, "  - %s\n", f)
	}
	return errors.New("refused: live substrate objects are not in the stack's state; adopt them or restore the state (see above)")
}

// confirm asks for a typed "yes" on in; anything else declines.
func confirm(in io.Reader, out io.Writer, stack string) bool {
	_, _ = fmt.Fprintf(out, "Apply exactly this delta to stack %q? Type yes: ", stack)
	line, _ := bufio.NewReader(in).ReadString('\n')
	return strings.TrimSpace(line) == "yes"
}
