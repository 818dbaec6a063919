// Module wire is the talos-validate tools' JSON wire format, in a module of
// its own without dependencies: internal/conformance (in the program's
// module, which must not link the tools' machinery) and the validators
// (tools/talos-validate*) import the one definition.
module github.com/milner/milner/tools/talos-validate/wire

go 1.26.0
