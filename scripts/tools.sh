#!/usr/bin/env bash
# Builds the pinned tools Milner needs into <repo>/.tools/bin:
#   pulumi                    - the Pulumi CLI, pinned by tools/pulumi/go.mod
#   pulumi-resource-libvirt   - the bridged libvirt provider, pinned by tools/libvirt-provider/go.mod
#   golangci-lint             - the linter CI runs, pinned by tools/lint/go.mod
# Provider plugins and CLI releases cannot be downloaded here, so both are
# built from Go modules. A build is skipped when its stamp (sha256 of the
# tool module's go.mod, go.sum, *.go, ldflags and `go version`) is unchanged.
# Usage: scripts/tools.sh [pulumi|libvirt|lint|bench]...   (default: pulumi libvirt)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$root/.tools/bin"
mkdir -p "$bin"
# The tool modules are separate from the program's module; never let a
# go.work at the repo root pull them together.
export GOWORK=off

# The CLI reports this version (the Automation API checks it), so take it
# from the pin itself rather than repeating it here.
pulumi_ver=$(sed -n 's#.*github.com/pulumi/pulumi/pkg/v3 \(v[^ ]*\).*#\1#p' "$root/tools/pulumi/go.mod" | head -n1)
[[ -n $pulumi_ver ]] || { echo "tools: cannot read the pulumi/pkg/v3 pin from tools/pulumi/go.mod" >&2; exit 1; }

# build NAME MODULE_DIR PACKAGE LDFLAGS
build() {
  local name=$1 dir=$2 pkg=$3 ldflags=$4
  local stamp="$root/.tools/$name.stamp" key start
  key=$({ cat "$dir/go.mod" "$dir/go.sum" "$dir"/*.go; echo "$ldflags"; go version; } | sha256sum | cut -d' ' -f1)
  if [[ -x "$bin/$name" && -f "$stamp" && "$(<"$stamp")" == "$key" ]]; then
    echo "tools: $name is up to date"
    return 0
  fi
  echo "tools: building $name (a cold build takes several minutes) ..."
  start=$(date +%s)
  rm -f "$stamp"
  # -mod=readonly: go.mod/go.sum are the pins; fail rather than silently change them.
  if ! (cd "$dir" && go build -mod=readonly -ldflags "$ldflags" -o "$bin/$name" "$pkg"); then
    echo "tools: FAILED to build $name after $(($(date +%s) - start))s" >&2
    exit 1
  fi
  echo "$key" >"$stamp"
  echo "tools: built $name in $(($(date +%s) - start))s"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(pulumi libvirt)
for t in "${targets[@]}"; do
  case $t in
    pulumi)
      build pulumi "$root/tools/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi \
        "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$pulumi_ver" ;;
    libvirt)
      build pulumi-resource-libvirt "$root/tools/libvirt-provider" . "" ;;
    lint)
      build golangci-lint "$root/tools/lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint "" ;;
    bench) # terraform-provider-libvirt for bench/ (Terraform's dev_overrides dir, .tools/tf)
      mkdir -p "$root/.tools/tf"; bin="$root/.tools/tf" build terraform-provider-libvirt "$root/tools/terraform-provider-libvirt" . "" ;;
    *) echo "tools: unknown tool '$t' (want pulumi, libvirt, lint or bench)" >&2; exit 2 ;;
  esac
done
