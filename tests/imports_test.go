package tests

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// module is this repository's module path.
const module = "github.com/milner/milner"

// deps lists, per package the patterns match (with -test: its test
// variants too), every package it links, through `go list -deps`'s own
// walk of the import graph, so nothing is missed that the build links.
func deps(t *testing.T, test bool, patterns ...string) map[string][]string {
	t.Helper()
	args := []string{"list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}"}
	if test {
		args = append(args, "-test")
	}
	cmd := exec.Command("go", append(args, patterns...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	require.NoError(t, err, "go list %v", patterns)
	links := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		links[f[0]] = f[1:]
	}
	require.NotEmpty(t, links)
	return links
}

// TestComponentsImportNoStack holds the component boundary: a component
// (and its tests) takes its Args and its own words (components/vocab),
// never the stack config or the program, so it is reusable and testable
// on its own and a config change does not ripple into it.
func TestComponentsImportNoStack(t *testing.T) {
	for pkg, links := range deps(t, true, "./components/...") {
		for _, d := range links {
			assert.False(t, d == module+"/stacks" || strings.HasPrefix(d, module+"/stacks/"), "%s links %s", pkg, d)
		}
	}
}

// TestConfigLinksNoPulumi holds the stack config and the words it shares
// with the components free of the Pulumi SDK: the operator tool and the
// validators read a stack through them without linking the program.
func TestConfigLinksNoPulumi(t *testing.T) {
	for pkg, links := range deps(t, false, "./stacks/config", "./components/vocab") {
		for _, d := range links {
			assert.False(t, strings.HasPrefix(d, "github.com/pulumi/"), "%s links %s", pkg, d)
		}
	}
}
