package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/milner/milner/internal/docs"
	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/upgrade"
)

func init() {
	register("upgrade", "upgrade Talos, then Kubernetes, to the stack's declared versions, one node at a time (health-gated, resumable)", runUpgrade)
}

// runUpgrade is `milner upgrade --stack <name> [--dry-run] [--yes]
// [--talosconfig F]`. It reads the declared versions and nodes from
// Pulumi.<stack>.yaml, asks every node what it runs, prints the plan and,
// after a typed confirmation (or --yes), runs it. It touches no Pulumi
// state: run `milner up` afterwards.
func runUpgrade(args []string) error {
	fs := flag.NewFlagSet("upgrade", flag.ContinueOnError)
	var eo engine.Options
	fs.StringVar(&eo.Stack, "stack", "", "stack name; its config is Pulumi.<stack>.yaml in the repo (required)")
	fs.StringVar(&eo.Repo, "repo", ".", "repository root (holds the stack files)")
	fs.StringVar(&eo.StateDir, "state", "", fmt.Sprintf("file backend directory (default <repo>/%s); locates the default talosconfig", engine.DefaultStateDir))
	talosconfig := fs.String("talosconfig", "", "talosconfig file (default: the one milner up wrote for the stack)")
	dryRun := fs.Bool("dry-run", false, "print the plan and change nothing")
	yes := fs.Bool("yes", false, "run without the typed confirmation")
	if err := parseFlags(fs, args, "stack"); err != nil {
		return err
	}
	if *talosconfig == "" {
		*talosconfig = clientFiles(eo)[1]
	}
	s, err := docs.ReadStack(filepath.Join(eo.Repo, "Pulumi."+eo.Stack+".yaml"))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := upgrade.Connect(ctx, *talosconfig, upgrade.FromConfig(s.Config))
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	return upgrade.Execute(ctx, c, upgrade.DefaultOptions(os.Stdout), *dryRun, func(*upgrade.Plan) bool {
		if *yes {
			return true
		}
		fmt.Printf("Type the stack name (%s) to upgrade these nodes: ", eo.Stack)
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		return strings.TrimSpace(line) == eo.Stack
	})
}
