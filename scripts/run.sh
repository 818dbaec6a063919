#!/usr/bin/env bash
# The main job: on a fresh machine, build the pinned tools, start local
# libvirt, make the local stack's boot image, and preview (or, with --up,
# apply) a stack on the local file backend through the real Pulumi engine.
#
# Usage: scripts/run.sh [--up] [--stack NAME]     (default stack: local)
#
# State lives in <repo>/.pulumi/state (git-ignored). The passphrase comes
# from MILNER_PASSPHRASE; the local stack (no secrets) defaults to
# "milner-local". The local stack's domains are named milner-local-cp-{1,2,3};
# its network is isolated (10.199.0.0/24, no forward).
set -euo pipefail

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

"$root/scripts/tools.sh"
"$root/scripts/libvirt-up.sh"

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
