// Command milner is the Milner Pulumi program: a whole Talos Kubernetes
// cluster, from machines to apps. Run it with `pulumi preview` / `pulumi up`.
package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/stacks"
)

func main() { pulumi.Run(stacks.Program) }
