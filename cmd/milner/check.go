package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/milner/milner/internal/conformance"
	"github.com/milner/milner/internal/docs"
)

func init() {
	register("check", "evaluate the layer rules on a stack under mocks and print its conformance figure", runCheck)
}

// runCheck is `milner check --stack <name> | --all`. It needs no engine, no
// provider and no secret: the program runs under the recording mock.
func runCheck(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	repo := fs.String("repo", ".", "repository root (holds the Pulumi.<stack>.yaml files)")
	stack := fs.String("stack", "", "stack to check; its config is Pulumi.<stack>.yaml")
	all := fs.Bool("all", false, "check every committed stack")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var files []string
	switch {
	case *all && *stack != "":
		return errors.New("give --stack or --all, not both")
	case *all:
		var err error
		if files, err = docs.StackFiles(*repo); err != nil {
			return err
		}
		if len(files) == 0 {
			return fmt.Errorf("no Pulumi.<stack>.yaml in %s", *repo)
		}
	case *stack != "":
		files = []string{filepath.Join(*repo, "Pulumi."+*stack+".yaml")}
	default:
		return errors.New("--stack (or --all) is required")
	}

	var failed []string
	for _, f := range files {
		s, err := docs.ReadStack(f)
		if err != nil {
			return err
		}
		ev, err := conformance.Collect(s.Name, s.Raw, s.SecretKeys)
		if err != nil {
			return err
		}
		fig := conformance.Evaluate(s.Name, ev)
		fmt.Print(fig)
		if !fig.OK() {
			failed = append(failed, s.Name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("layer rules fail on %s; fix the program or the stack config before any up", strings.Join(failed, ", "))
	}
	return nil
}
