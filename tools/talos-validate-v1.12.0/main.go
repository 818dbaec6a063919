// Command talos-validate-v1.12.0 is Milner's Talos config validator linked with
// machinery v1.12.0 (this module's go.mod pins it); see tools/talos-validate.
package main

import (
	"os"

	validate "github.com/milner/milner/tools/talos-validate"
)

func main() { os.Exit(validate.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
