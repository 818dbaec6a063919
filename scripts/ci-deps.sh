#!/usr/bin/env bash
# Installs and starts what `make ci` needs on a fresh Debian machine (root):
# nix-bin for the flake check, libvirt/QEMU for the integration tests
# (scripts/libvirt-up.sh), PostgreSQL for the team-backend tests (a role and
# database "milner_it" on loopback, password "milner_it"), and the real
# node's runtime for `make runtime` (containerd, runc, the CNI plugins,
# busybox-static for the provisioner's helper image; started by the test
# itself, in its own network namespace). Idempotent;
# installs only what is missing and never changes configuration the machine
# already had (a cluster that exists is only started).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

missing=()
for p in nix-bin postgresql containerd runc containernetworking-plugins busybox-static; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "ci-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q
  apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}"
fi
"$root/scripts/libvirt-up.sh"

# PostgreSQL: start Debian's default cluster if it is down (pg_ctlcluster,
# no systemd here), then the tests' role and database, once.
ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
cluster=$(pg_lsclusters -h | awk -v v="$ver" '$1 == v {print $2; exit}')
if [[ -z $cluster ]]; then
  pg_createcluster "$ver" main >/dev/null
  cluster=main
fi
pg_lsclusters -h | awk -v v="$ver" -v c="$cluster" '$1 == v && $2 == c {print $4}' | grep -q online ||
  pg_ctlcluster "$ver" "$cluster" start
for _ in $(seq 1 30); do
  su postgres -c "psql -qAtc 'select 1'" >/dev/null 2>&1 && break
  sleep 1
done
if ! su postgres -c "psql -qAtc \"select 1 from pg_roles where rolname = 'milner_it'\"" | grep -q 1; then
  su postgres -c "psql -qc \"create role milner_it login password 'milner_it'\""
  su postgres -c "createdb -O milner_it milner_it"
fi
echo "ci-deps: PostgreSQL $ver/$cluster is up (postgres://milner_it:milner_it@127.0.0.1:5432/milner_it)"
