//go:build tools

// Package tools pins the pulumi CLI version that Milner is built and tested
// with. The blank import keeps the CLI's module in go.mod/go.sum under
// `go mod tidy`; scripts/tools.sh builds it into .tools/bin/pulumi.
package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
