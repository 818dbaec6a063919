package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/conformance"
	"github.com/milner/milner/internal/docs"
)

func checkCmd() *cobra.Command {
	var stack string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Evaluate the layer rules on a stack under mocks and print its conformance figure",
		Long: `check runs the program on the committed stack config under a recording mock
(no engine, no provider, no secret) and evaluates Milner's layer rules on
what it registers: protect flags, replace policies, names, apply modes.`,
		Example: `  milner check --all
  milner check --stack prod --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := projectDir(cmd)
			var files []string
			switch {
			case all && stack != "":
				return usageError{errors.New("give --stack or --all, not both")}
			case all:
				var err error
				if files, err = docs.StackFiles(dir); err != nil {
					return err
				}
				if len(files) == 0 {
					return fmt.Errorf("no Pulumi.<stack>.yaml in %s", dir)
				}
			case stack != "":
				files = []string{filepath.Join(dir, "Pulumi."+stack+".yaml")}
			default:
				return usageError{errors.New("--stack (or --all) is required")}
			}
			var failed []string
			var figures []conformance.Figure
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
				figures = append(figures, fig)
				if !asJSON {
					fmt.Print(fig)
				}
				if !fig.OK() {
					failed = append(failed, s.Name)
				}
			}
			if asJSON {
				if err := writeJSON(os.Stdout, figures); err != nil {
					return err
				}
			}
			if len(failed) > 0 {
				return refused("layer rules fail on %s; fix the program or the stack config before any up", strings.Join(failed, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&stack, "stack", "s", "", "stack to check; its config is Pulumi.<stack>.yaml")
	cmd.Flags().BoolVar(&all, "all", false, "check every committed stack")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the figures as JSON")
	_ = cmd.RegisterFlagCompletionFunc("stack", completeStacks)
	return cmd
}
