package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/milner/milner/internal/docs"
)

func init() {
	register("docs", "render the stack docs from the committed stack configs (--check: fail on drift)", runDocs)
}

// runDocs is `milner docs [--check] [--stack <name>]`. The docs cover every
// committed stack; --stack prints one stack's rendering without writing.
func runDocs(args []string) error {
	fs := flag.NewFlagSet("docs", flag.ContinueOnError)
	repo := fs.String("repo", ".", "repository root (holds the Pulumi.<stack>.yaml files)")
	check := fs.Bool("check", false, "write nothing; exit non-zero when the committed docs differ from the rendering")
	stack := fs.String("stack", "", "print the rendering of this stack only, writing nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *stack != "":
		s, err := docs.ReadStack(filepath.Join(*repo, "Pulumi."+*stack+".yaml"))
		if err != nil {
			return err
		}
		fmt.Print(docs.RenderStack(s))
		return nil
	case *check:
		drifted, err := docs.Drift(*repo)
		if err != nil {
			return err
		}
		if len(drifted) > 0 {
			return fmt.Errorf("%s differ from the stack configs; run `go run ./cmd/milner docs` and commit the result", strings.Join(drifted, ", "))
		}
		fmt.Println("docs: up to date")
		return nil
	default:
		files, err := docs.Write(*repo)
		if err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(*repo, "README.md")); err == nil && len(files) == 1 {
			fmt.Fprintf(os.Stderr, "docs: README.md has no %s ... %s section; only %s written\n", docs.BeginMarker, docs.EndMarker, docs.File)
		}
		fmt.Printf("docs: wrote %s\n", strings.Join(files, ", "))
		return nil
	}
}
