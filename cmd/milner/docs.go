package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/docs"
	"github.com/milner/milner/internal/stackfile"
)

// docsChecked is docs' result (--json): the files written, or --check's
// drifted files and missing cited paths.
type docsChecked struct {
	Wrote    []string `json:"wrote,omitempty"`
	Drifted  []string `json:"drifted,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

func docsCmd() *cobra.Command {
	var check, asJSON bool
	var stack string
	cmd := &cobra.Command{
		Use:   "docs",
		Short: "Render the stack docs and the CLI reference from the committed stacks and commands (--check: fail on drift, a cited path that does not exist, or a sentence two docs tell)",
		Example: `  milner docs            # rewrites docs/stacks.md, README's stacks table and docs/cli.md
  milner docs --check    # CI: exit 7 when any of them differ from the rendering, a doc cites a missing path, or two docs tell one sentence
  milner docs --stack dev`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := projectDir(cmd)
			ref, err := docs.CLIReference(cmd.Root())
			if err != nil {
				return err
			}
			switch {
			case stack != "":
				s, err := stackfile.Read(stackfile.Path(dir, stack), nil)
				if err != nil {
					return err
				}
				fmt.Print(docs.RenderStack(s))
				return nil
			case check:
				drifted, problems, err := docs.Check(dir, ref)
				if err != nil {
					return err
				}
				res := docsChecked{Drifted: drifted, Problems: problems}
				switch {
				case asJSON && len(drifted)+len(problems) > 0:
					return emit(true, res, nil, fmt.Errorf("%w: docs differ or cite missing paths", errPending))
				case len(drifted) > 0:
					return fmt.Errorf("%w: %s differ from the stack configs and commands; run `go run ./cmd/milner docs` and commit the result", errPending, strings.Join(drifted, ", "))
				case len(problems) > 0:
					return fmt.Errorf("%w: the docs cite what the repository does not hold:\n  %s", errPending, strings.Join(problems, "\n  "))
				}
				return emit(asJSON, res, func() { fmt.Println("docs: up to date; every path they cite exists; no sentence is told in two docs") }, nil)
			default:
				files, err := docs.Write(dir, ref)
				if err != nil {
					return err
				}
				return emit(asJSON, docsChecked{Wrote: files}, func() { fmt.Printf("docs: wrote %s\n", strings.Join(files, ", ")) }, nil)
			}
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "write nothing; exit 7 when the committed docs differ from the rendering, when README.md or docs/ cite a repository path that does not exist, or when the README's Layout table misses a folder or package")
	cmd.Flags().StringVarP(&stack, "stack", "s", "", "print the rendering of this stack only, writing nothing")
	addJSON(cmd, &asJSON)
	cmd.MarkFlagsMutuallyExclusive("stack", "json") // the rendering is the output
	return cmd
}
