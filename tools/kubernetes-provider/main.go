// Command pulumi-resource-kubernetes is the Pulumi Kubernetes provider plugin,
// built from github.com/pulumi/pulumi-kubernetes/provider/v4 (pinned by this
// module's go.mod) into .tools/bin by scripts/tools.sh, for the real-API tests.
//
// It is upstream's cmd/pulumi-resource-kubernetes/main.go: that package embeds
// schema-embed.json and terraform-mapping-embed.json, which upstream's Makefile
// generates (cmd/pulumi-resource-kubernetes/generate.go) and the module download
// does not carry, so scripts/tools.sh runs that same generate.go here first
// (the two files are git-ignored) and builds this copy of main.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var pulumiSchema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
