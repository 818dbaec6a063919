#!/usr/bin/env bash
# The main job: on a fresh machine, build the pinned tools, start local
# libvirt, make the local stack's boot image, and preview (or, with --up,
# apply) a stack on the local file backend through the real Pulumi engine.
#
# Usage: scripts/run.sh [--up] [--stack NAME]     (default stack: local)
#
# State lives where the user's Pulumi keeps it (PULUMI_BACKEND_URL or
# `pulumi login`); with neither, in <repo>/.pulumi/state (git-ignored), the
# backend this script then exports for `pulumi` too. The passphrase is
# PULUMI_CONFIG_PASSPHRASE(_FILE); the local stack holds no secret and
# stops after the substrate, so milner needs none for it. Its domains are
# named milner-local-cp-{1,2,3}; its network is isolated (10.199.0.0/24,
# no forward).
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
verb=preview
stack=local
while (($#)); do
  case $1 in
    --up) verb=up ;;
    --stack) stack=${2:?--stack needs a name}; shift ;;
    *) echo "run: unknown argument '$1' (usage: scripts/run.sh [--up] [--stack NAME])" >&2; exit 2 ;;
  esac
  shift
done

# milner runs the engine in-process: only the provider plugin is needed
# (the Pulumi CLI is for the plain-`pulumi` path, `scripts/tools.sh pulumi`).
"$root/scripts/tools.sh" libvirt
"$root/scripts/libvirt-up.sh"
if [[ -z ${PULUMI_BACKEND_URL:-} && ! -s ${PULUMI_HOME:-$HOME/.pulumi}/credentials.json ]]; then
  export PULUMI_BACKEND_URL="file://$root/.pulumi/state"
  echo "run: no Pulumi login: state in $PULUMI_BACKEND_URL"
fi

# The local stack boots from a small blank image (no Talos image can be
# downloaded here); its path is milner:substrate.libvirt.bootImage of
# Pulumi.local.yaml.
if [[ $stack == local ]]; then
  boot=/var/lib/milner/local/boot.qcow2
  if [[ ! -f $boot ]]; then
    mkdir -p "$(dirname "$boot")"
    qemu-img create -q -f qcow2 "$boot" 64M
    echo "run: made the local boot image $boot"
  fi
fi

cd "$root"
exec go run ./cmd/milner "$verb" --stack "$stack"
