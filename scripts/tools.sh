#!/usr/bin/env bash
# Builds the pinned tools Milner needs into <repo>/.tools/bin:
#   pulumi                    - the Pulumi CLI, pinned by tools/pulumi/go.mod
#   pulumi-resource-libvirt   - the bridged libvirt provider, pinned by tools/libvirt-provider/go.mod
#   golangci-lint             - the linter CI runs, pinned by tools/lint/go.mod
#   kube-apiserver, etcd      - a real Kubernetes API for tests/kubeapi, pinned by
#                               tools/kube-apiserver/go.mod and tools/etcd/go.mod
#   kube-controller-manager   - its controllers (Pods, PVCs from the charts' workloads),
#                               pinned by tools/kube-controller-manager/go.mod (the same release)
#   kubelet, kube-scheduler, kube-proxy - the node side of the real-kubelet apps scenario
#                               (tests/kubeapi), pinned by tools/kubelet/go.mod (the same release)
#   local-path-provisioner    - the binary of that scenario's provisioner image, pinned at its
#                               chart's appVersion by tools/local-path-provisioner/go.mod
#   vault                     - the binary of that scenario's Vault image, pinned at the vault
#                               chart's appVersion by tools/vault/go.mod
#   coredns                   - that scenario's cluster DNS, the release Talos deploys, pinned
#                               by tools/coredns/go.mod
#   metallb-controller, metallb-speaker - the binaries of that scenario's MetalLB images,
#                               pinned at the metallb chart's appVersion by tools/metallb/go.mod
#   pulumi-resource-kubernetes - the Kubernetes provider plugin, pinned by
#                               tools/kubernetes-provider/go.mod
#   talos-validate-v<version> - Talos config validators, one per machinery version the
#                               supported-versions table names (stacks/config/supported-versions.txt);
#                               each a module generated into .tools/src, the code is tools/talos-validate
#   pulumi-resource-proxmoxve - the Proxmox VE provider plugin the proxmoxve sdk/v7 asks for,
#                               built from the unmodified upstream sources in
#                               ../shared/providers (its README: provenance, build command)
#   pulumi-resource-talos     - the Talos provider plugin, the release the program's
#                               pulumi-talos SDK asks for (go.mod), built from its unmodified
#                               upstream source in $MILNER_PROVIDERS_DIR (default ../shared/providers:
#                               pulumi-talos-v<ver> bridging terraform-provider-talos)
#   kubectl                   - the Kubernetes client the quick start and the runbooks run,
#                               pinned by tools/kubectl/go.mod (tools/kube-apiserver's release)
#   age-keygen                - the age key for `milner secrets export` and `etcd snapshot`,
#                               the program's own filippo.io/age pin (go.mod)
#   kubectl-oidc_login        - kubelogin, `kubectl oidc-login` for a stack with
#                               milner:cluster.oidc, pinned by tools/kubelogin/go.mod
#   terraform-provider-libvirt - for bench/ only (target bench), into .tools/tf (Terraform's
#                               dev_overrides directory), pinned by tools/terraform-provider-libvirt/go.mod
# Provider plugins and CLI releases cannot be downloaded here, so both are
# built from Go modules. A build is skipped when its stamp (sha256 of the
# tool module's go.mod, go.sum, *.go, ldflags and `go version`) is unchanged.
# Usage: scripts/tools.sh [pulumi|libvirt|lint|bench|kubeapi|kubelet|local-path-provisioner|vault|coredns|metallb|kubernetes|talos-validate|talos|proxmoxve|kubectl|age|kubelogin]...
#   (default: pulumi libvirt; kubeapi is kube-apiserver, kube-controller-manager and etcd)
# Run as root (scripts/run.sh, sudo) in a clone a user owns, what it writes
# into .tools is handed to the clone's owner when it ends, so the user's own
# run (the dev quick start) can rebuild there.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$root/.tools/bin"
mkdir -p "$bin"
if ((EUID == 0)); then
  # -H: .tools may be a link (a worktree's to its main clone's).
  trap 'chown -RH --reference="$root" "$root/.tools"' EXIT
fi
# The tool modules are separate from the program's module; never let a
# go.work at the repo root pull them together.
export GOWORK=off

# The CLI reports this version (the Automation API checks it), so take it
# from the pin itself rather than repeating it here.
pulumi_ver=$(sed -n 's#.*github.com/pulumi/pulumi/pkg/v3 \(v[^ ]*\).*#\1#p' "$root/tools/pulumi/go.mod" | head -n1)
[[ -n $pulumi_ver ]] || { echo "tools: cannot read the pulumi/pkg/v3 pin from tools/pulumi/go.mod" >&2; exit 1; }

# The Kubernetes provider reports the plugin version the program's SDK asks the
# engine for: sdk/v4's PkgResourceDefaultOpts passes pulumi.Version("<its own
# version>") and its pulumi-plugin.json names the same, so take it from go.mod.
kubernetes_ver=$(sed -n 's#.*github.com/pulumi/pulumi-kubernetes/sdk/v4 v\([^ ]*\).*#\1#p' "$root/go.mod" | head -n1)
# kube-apiserver reports the release it is built from (GET /version; clients
# such as the Kubernetes provider read it), as Kubernetes' hack/lib/version.sh
# stamps it; take it from the pin.
kube_ver=$(sed -n 's#^require k8s.io/kubernetes \(v[^ ]*\).*#\1#p' "$root/tools/kube-apiserver/go.mod")
[[ -n $kubernetes_ver && -n $kube_ver ]] || { echo "tools: cannot read the pulumi-kubernetes/sdk/v4 or k8s.io/kubernetes pin" >&2; exit 1; }
# The Talos provider plugin the program's SDK asks the engine for (sdk
# v0.7.1 requests plugin 0.7.1): its source folder is named after the tag.
talos_ver=$(sed -n 's#.*github.com/pulumiverse/pulumi-talos/sdk v\([^ ]*\).*#\1#p' "$root/go.mod" | head -n1)
[[ -n $talos_ver ]] || { echo "tools: cannot read the pulumiverse/pulumi-talos/sdk pin from go.mod" >&2; exit 1; }
providers=${MILNER_PROVIDERS_DIR:-$root/../shared/providers}
kube_minor=${kube_ver#v1.}; kube_minor=${kube_minor%%.*}
kube_ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $p.gitVersion=$kube_ver -X $p.gitMajor=1 -X $p.gitMinor=$kube_minor -X $p.gitTreeState=clean"
done

# kubernetes_embeds writes the two files the provider's main embeds, as the
# provider's own Makefile does: its generate.go stamps the version into the schema.
kubernetes_embeds() {
  local dir="$root/tools/kubernetes-provider" src
  src=$(cd "$dir" && go mod download github.com/pulumi/pulumi-kubernetes/provider/v4 &&
    go list -mod=readonly -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)/cmd/pulumi-resource-kubernetes
  install -m 0644 "$src/schema.json" "$src/terraform-mapping.json" "$dir/"
  (cd "$dir" && VERSION=$kubernetes_ver go run -mod=readonly "$src/generate.go")
  rm -f "$dir/schema.json" "$dir/terraform-mapping.json"
}

# build NAME MODULE_DIR PACKAGE LDFLAGS [PREPARE]
# PREPARE is a command run before a build that is not skipped. $also names
# the modules the tool's go.mod replaces with a local directory: their
# sources are part of the stamp. $trees names whole source trees (a vendored
# upstream provider and the modules it replaces): every file in them, by
# path and content, is part of the stamp.
build() {
  local name=$1 dir=$2 pkg=$3 ldflags=$4 prepare=${5:-}
  local stamp="$root/.tools/$name.stamp" key start
  key=$({ cat "$dir/go.mod" "$dir/go.sum" "$dir"/*.go; for a in ${also:-}; do cat "$a/go.mod" "$a"/*.go; done
    for t in ${trees:-}; do (cd "$t" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum); done
    echo "$ldflags"; go version; } | sha256sum | cut -d' ' -f1)
  if [[ -x "$bin/$name" && -f "$stamp" && "$(<"$stamp")" == "$key" ]]; then
    echo "tools: $name is up to date"
    return 0
  fi
  echo "tools: building $name (a cold build takes several minutes) ..."
  start=$(date +%s)
  rm -f "$stamp"
  [[ -z $prepare ]] || $prepare
  # -mod=readonly: go.mod/go.sum are the pins; fail rather than silently change them.
  if ! (cd "$dir" && go build -mod=readonly -ldflags "$ldflags" -o "$bin/$name" "$pkg"); then
    echo "tools: FAILED to build $name after $(($(date +%s) - start))s" >&2
    exit 1
  fi
  echo "$key" >"$stamp"
  echo "tools: built $name in $(($(date +%s) - start))s"
}

# validator_module VERSION writes the module of the Talos config validator
# linked with machinery VERSION into .tools/src/talos-validate-VERSION: a
# go.mod requiring that machinery and the validator's code
# (tools/talos-validate), and a main calling it; go.sum from go mod tidy
# when the go.mod changed. Generated from the table, so a new Talos minor
# needs no module of its own.
validator_module() {
  local v=$1 d="$root/.tools/src/talos-validate-$1"
  mkdir -p "$d"
  cat >"$d/main.go" <<EOF
// Command talos-validate-$v is Milner's Talos config validator linked with
// machinery $v; generated by scripts/tools.sh from stacks/config/supported-versions.txt.
package main

import (
	"os"

	validate "github.com/milner/milner/tools/talos-validate"
)

func main() { os.Exit(validate.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
EOF
  cat >"$d/go.mod.want" <<EOF
module github.com/milner/milner/tools/talos-validate-$v

go 1.26.0

require (
	github.com/milner/milner/tools/talos-validate v0.0.0
	github.com/siderolabs/talos/pkg/machinery $v
)

replace github.com/milner/milner/tools/talos-validate => $root/tools/talos-validate

replace github.com/milner/milner/tools/talos-validate/wire => $root/tools/talos-validate/wire
EOF
  # Tidy (it rewrites go.mod and writes go.sum) only when what is wanted changed.
  if [[ -f $d/go.sum && -f $d/go.mod.tidied ]] && cmp -s "$d/go.mod.want" "$d/go.mod.tidied"; then
    return 0
  fi
  cp "$d/go.mod.want" "$d/go.mod"
  (cd "$d" && go mod tidy) || { echo "tools: go mod tidy for talos-validate-$v failed" >&2; exit 1; }
  cp "$d/go.mod.want" "$d/go.mod.tidied"
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
    kubeapi) # a real Kubernetes API (tests/kubeapi): kube-apiserver, its controllers and its etcd
      build kube-apiserver "$root/tools/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
      build kube-controller-manager "$root/tools/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
      build etcd "$root/tools/etcd" . "" ;;
    kubelet) # a node for the real-kubelet apps scenario (tests/kubeapi): kubelet, scheduler, kube-proxy
      for c in kubelet kube-scheduler kube-proxy; do
        build "$c" "$root/tools/kubelet" "k8s.io/kubernetes/cmd/$c" "$kube_ldflags"
      done ;;
    local-path-provisioner) # the provisioner's image in the real-kubelet scenario: static, as
      # its image has it (upstream scripts/build: CGO_ENABLED=0, -s -w)
      CGO_ENABLED=0 build local-path-provisioner "$root/tools/local-path-provisioner" github.com/rancher/local-path-provisioner "-s -w" ;;
    coredns) # the cluster DNS of the real-kubelet scenario, static as CoreDNS' Makefile builds it
      CGO_ENABLED=0 build coredns "$root/tools/coredns" github.com/coredns/coredns "-s -w" ;;
    vault) # Vault's image in the real-kubelet scenario, static as Vault's release builds it
      CGO_ENABLED=0 build vault "$root/tools/vault" github.com/hashicorp/vault "-s -w" ;;
    metallb) # MetalLB's controller and speaker images in that scenario, static as
      # their Dockerfiles build them (controller/Dockerfile, speaker/Dockerfile: CGO_ENABLED=0)
      for c in controller speaker; do
        CGO_ENABLED=0 build "metallb-$c" "$root/tools/metallb" "go.universe.tf/metallb/$c" ""
      done ;;
    kubernetes)
      build pulumi-resource-kubernetes "$root/tools/kubernetes-provider" . \
        "-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$kubernetes_ver" kubernetes_embeds ;;
    talos-validate) # one validator per machinery version of the supported-versions table
      for v in $(awk '$1 == "generator" { print $2 } NF == 4 && $1 ~ /^v[0-9]/ { print $4 }' "$root/stacks/config/supported-versions.txt" | sort -uV); do
        validator_module "$v"
        also="$root/tools/talos-validate $root/tools/talos-validate/wire" build "talos-validate-$v" "$root/.tools/src/talos-validate-$v" . ""
        got=$("$bin/talos-validate-$v" version)
        [[ $got == "$v" ]] || { echo "tools: talos-validate-$v links machinery $got, not $v (tools/talos-validate/go.mod requires a newer one)" >&2; exit 1; }
      done ;;
    proxmoxve) # ../shared/providers/README.md: the version goes in by -ldflags, as upstream's Makefile does
      src="$providers/pulumi-proxmoxve-v7.13.0"
      [[ -d $src ]] || { echo "tools: $src is missing (../shared beside the repo, see docs/verification.md)" >&2; exit 1; }
      src=$(cd "$src" && pwd)
      trees="$src $(cd "$src/../terraform-provider-proxmox-v0.95.0" && pwd)" build pulumi-resource-proxmoxve "$src" \
        ./cmd/pulumi-resource-proxmoxve "-X github.com/muhlba91/pulumi-proxmoxve/provider/pkg/version.Version=7.13.0" ;;
    talos) # the Talos provider plugin, as upstream's Makefile builds it (the version by -ldflags)
      src="$providers/pulumi-talos-v$talos_ver"
      [[ -f $src/go.mod ]] || { echo "tools: no Talos provider source at $src (set MILNER_PROVIDERS_DIR)" >&2; exit 1; }
      tf=$(sed -n 's#^replace github.com/siderolabs/terraform-provider-talos => \(\.\./[^ ]*\)$#\1#p' "$src/go.mod")
      [[ -n $tf && -d $src/$tf ]] || { echo "tools: $src/go.mod replaces terraform-provider-talos with no sibling folder" >&2; exit 1; }
      trees="$src $src/$tf" build pulumi-resource-talos "$src" ./cmd/pulumi-resource-talos \
        "-X github.com/pulumiverse/pulumi-talos/provider/pkg/version.Version=$talos_ver" ;;
    kubectl)
      build kubectl "$root/tools/kubectl" k8s.io/kubernetes/cmd/kubectl "$kube_ldflags" ;;
    age) # from the program's module: the same age as milner's own encryption
      build age-keygen "$root" filippo.io/age/cmd/age-keygen "" ;;
    kubelogin) # kubectl finds `kubectl oidc-login` as kubectl-oidc_login on PATH
      build kubectl-oidc_login "$root/tools/kubelogin" github.com/int128/kubelogin \
        "-X main.version=$(sed -n 's#^require github.com/int128/kubelogin \(v[^ ]*\)$#\1#p' "$root/tools/kubelogin/go.mod")" ;;
    *) echo "tools: unknown tool '$t' (want pulumi, libvirt, lint, bench, kubeapi, kubelet, local-path-provisioner, vault, coredns, metallb, kubernetes, talos-validate, talos, proxmoxve, kubectl, age or kubelogin)" >&2; exit 2 ;;
  esac
done
