#!/usr/bin/env bash
# Removes every libvirt object of one bench cluster: its domains
# (<cluster>-*), its pool (and the pool's directory under
# /var/lib/milner-bench) and its network. Tool-neutral and much faster than
# a destroy: the untimed "prepare" of P3 (create from empty) for both tools.
# Usage: bench/wipe.sh CLUSTER...
set -euo pipefail
v() { virsh -q -c qemu:///system "$@"; }
for c in "$@"; do
  [[ $c == bench-* ]] || { echo "wipe: refusing to touch '$c' (not a bench-* cluster)" >&2; exit 2; }
  for d in $(v list --all --name | grep "^$c-" || true); do
    v destroy "$d" >/dev/null 2>&1 || true
    v undefine "$d" --nvram >/dev/null 2>&1 || v undefine "$d" >/dev/null
  done
  if v pool-info "$c" >/dev/null 2>&1; then
    v pool-destroy "$c" >/dev/null 2>&1 || true
    v pool-undefine "$c" >/dev/null
  fi
  rm -rf "/var/lib/milner-bench/$c"
  if v net-info "$c" >/dev/null 2>&1; then
    v net-destroy "$c" >/dev/null 2>&1 || true
    v net-undefine "$c" >/dev/null
  fi
done
