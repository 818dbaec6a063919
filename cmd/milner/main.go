// Command milner runs the Milner program through the Pulumi Automation API
// and turns the seeds' shipping rules into commands that cannot be skipped
// by accident. Every subcommand takes --stack and exits non-zero on refusal.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// subcommand is one `milner <name>` verb.
type subcommand struct {
	summary string
	run     func(args []string) error
}

var subcommands = map[string]subcommand{}

// register adds a subcommand; each verb's file registers itself in init.
func register(name, summary string, run func(args []string) error) {
	subcommands[name] = subcommand{summary: summary, run: run}
}

// parseFlags parses a verb's flags and refuses, naming them, the required
// flags that were not given.
func parseFlags(fs *flag.FlagSet, args []string, required ...string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	var missing []string
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing required %s", strings.Join(missing, ", "))
	}
	return nil
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: milner <command> --stack <name> [flags]\n\ncommands:")
	names := make([]string, 0, len(subcommands))
	for n := range subcommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, subcommands[n].summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := subcommands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "milner: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := cmd.run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "milner %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
