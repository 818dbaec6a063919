// Command policy is Milner's policy pack for plain Pulumi: `pulumi preview
// --policy-pack policy` (PulumiPolicy.yaml, runtime go) runs it as an
// analyzer plugin. The rules are internal/policypack's, the same that
// milner's in-process engine loads.
package main

import (
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/policyx"

	"github.com/milner/milner/internal/policypack"
)

func main() {
	if err := policyx.Main(func(*pulumi.Context) (policyx.PolicyPack, error) { return policypack.Pack() }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
