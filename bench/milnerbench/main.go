// Command milnerbench drives bench/run.sh: it writes the per-N stack file and
// Terraform variables from one node list (gen), runs Milner's program on the
// real engine through internal/engine exactly as `milner preview|up` does
// (open, preview, up, reset), and times two tools against each other in
// alternating order, with the peak memory of each tool's process tree
// (compare).
package main

import (
	"fmt"
	"os"
)

// verbs maps a subcommand to its function.
var verbs = map[string]func(args []string) error{
	"gen":     runGen,
	"open":    runOpen,
	"preview": runPreview,
	"up":      runUp,
	"reset":   runReset,
	"compare": runCompare,
	"flip":    runFlip,
	"flip-tf": runFlipTF,
}

func main() {
	if len(os.Args) < 2 || verbs[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: milnerbench gen|open|preview|up|reset|compare|flip|flip-tf [flags]")
		os.Exit(2)
	}
	err := verbs[os.Args[1]](os.Args[2:])
	stopProfile()
	if err != nil {
		fmt.Fprintf(os.Stderr, "milnerbench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
