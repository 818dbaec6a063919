package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/secretsbundle"
	"github.com/milner/milner/stacks"
)

func init() {
	register("secrets", "export the cluster's Talos secrets bundle, age-encrypted (export), or import it back after state loss (import)", runSecrets)
}

// runSecrets is `milner secrets export --stack <s> --out <file> --recipient <age1...>...`
// and `milner secrets import --stack <s> --in <file> --identity <key file>`.
func runSecrets(args []string) error {
	if len(args) == 0 || (args[0] != "export" && args[0] != "import") {
		return errors.New("usage: milner secrets export|import --stack <name> [flags]")
	}
	fs := flag.NewFlagSet("secrets "+args[0], flag.ContinueOnError)
	eo := engineFlags(fs)
	if args[0] == "export" {
		out := fs.String("out", "", "the encrypted bundle file to write (required; never commit it)")
		var recipients stringList
		fs.Var(&recipients, "recipient", "an age public key (age1..., from age-keygen) that may decrypt the bundle (repeatable, at least one)")
		if err := parseFlags(fs, args[1:], "stack", "out", "recipient"); err != nil {
			return err
		}
		return exportSecrets(eo, *out, recipients)
	}
	in := fs.String("in", "", "the encrypted bundle file `milner secrets export` wrote (required)")
	identity := fs.String("identity", "", "the age key file (AGE-SECRET-KEY-1...) of one of the bundle's recipients (required)")
	if err := parseFlags(fs, args[1:], "stack", "in", "identity"); err != nil {
		return err
	}
	return importSecrets(eo, *in, *identity)
}

// exportSecrets reads the secrets bundle from state (in memory only) and
// writes it age-encrypted, 0600.
func exportSecrets(eo *engine.Options, out string, recipients []string) error {
	ctx, stop, st, err := openStack(eo)
	if err != nil {
		return err
	}
	defer stop()
	_, outs, err := st.OutputsInClear(ctx, gate.TypeTalosSecrets)
	if err != nil {
		return err
	}
	ms, ok := outs["machineSecrets"].(map[string]any)
	if !ok {
		return fmt.Errorf("stack %q: the secrets bundle has no machineSecrets output", eo.Stack)
	}
	b, err := secretsbundle.FromState(ms)
	if err != nil {
		return err
	}
	plain, err := secretsbundle.Marshal(b)
	if err != nil {
		return err
	}
	sealed, err := secretsbundle.Encrypt(plain, recipients)
	if err != nil {
		return err
	}
	if err := engine.WritePrivateFile(out, sealed); err != nil {
		return err
	}
	fmt.Printf("milner secrets: wrote the secrets bundle of stack %q (cluster %s), age-encrypted for %d recipients, to %s; keep it off this machine and out of git\n", eo.Stack, b.Cluster.ID, len(recipients), out)
	return nil
}

// importSecrets decrypts the bundle into a private temporary file, checks
// it, and imports it as the program's secrets resource; the clear file is
// removed whatever happens.
func importSecrets(eo *engine.Options, in, identity string) error {
	sealed, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(identity)
	if err != nil {
		return err
	}
	plain, err := secretsbundle.Decrypt(sealed, bytes.NewReader(key))
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if _, err := secretsbundle.Parse(plain); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	dir, err := os.MkdirTemp("", "milner-secrets-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	file := filepath.Join(dir, "secrets.yaml")
	if err := engine.WritePrivateFile(file, plain); err != nil {
		return err
	}

	ctx, stop, st, err := openStack(eo)
	if err != nil {
		return err
	}
	defer stop()
	name := clusterName(st.Config()) + "-secrets"
	if err := st.Import(ctx, gate.TypeTalosSecrets, name, file); err != nil {
		return err
	}
	fmt.Printf("milner secrets: imported the secrets bundle into stack %q as %s (protected); next: adopt the nodes, then `milner preview --stack %s` must plan no create of a secrets bundle\n", eo.Stack, name, eo.Stack)
	return nil
}

// secretsBundleRefusals applies gate.CheckSecretsBundle. It lists the host's
// live node VMs only when the preview creates a bundle at all, so a normal
// up pays nothing for it.
func secretsBundleRefusals(ctx context.Context, st *engine.Stack, steps []gate.Step) ([]gate.Refusal, error) {
	creates := false
	for _, s := range steps {
		creates = creates || (s.Type == gate.TypeTalosSecrets && s.Op == "create")
	}
	if !creates {
		return nil, nil
	}
	live, err := liveNodeVMs(st)
	if err != nil {
		return nil, err
	}
	return gate.CheckSecretsBundle(steps, live, st.Name()), nil
}

// liveNodeVMs lists the libvirt domains named like the stack's node VMs.
// The Proxmox inventory needs its API; there the rule sees state and
// imports only.
func liveNodeVMs(st *engine.Stack) ([]string, error) {
	cfg := st.Config()
	var sub stacks.SubstrateConfig
	if err := json.Unmarshal([]byte(cfg["milner:substrate"]), &sub); err != nil || sub.Kind != "libvirt" {
		return nil, nil
	}
	uri := stacks.DefaultLibvirtURI
	if sub.Libvirt != nil && sub.Libvirt.URI != "" {
		uri = sub.Libvirt.URI
	}
	declared, err := guard.DeclaredLibvirt(st.Name(), cfg)
	if err != nil {
		return nil, err
	}
	live, err := guard.ListLibvirt(uri)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, o := range live {
		if o.Type == guard.TypeDomain {
			names[o.Name] = true
		}
	}
	var out []string
	for _, d := range declared {
		if d.Type == guard.TypeDomain && names[d.Name] {
			out = append(out, d.Name)
		}
	}
	return out, nil
}
