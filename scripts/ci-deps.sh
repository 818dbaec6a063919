#!/usr/bin/env bash
# Installs and starts what `make ci` needs on a fresh Debian machine (root):
# nix-bin for the flake check, libvirt/QEMU for the integration tests
# (scripts/libvirt-up.sh). Idempotent; installs only what is missing and
# never changes configuration the machine already had.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

missing=()
for p in nix-bin; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "ci-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q
  apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}"
fi
"$root/scripts/libvirt-up.sh"
