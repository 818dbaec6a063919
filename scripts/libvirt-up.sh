#!/usr/bin/env bash
# Brings up a local libvirt daemon (qemu:///system) for Milner's tests.
# Idempotent. This machine has no systemd and no KVM, so the daemons are
# started by hand and domains must use type "qemu" (TCG emulation).
set -euo pipefail

uri=qemu:///system
log=/var/log/libvirt/libvirtd.log
# xsltproc: terraform-provider-libvirt runs it for a network's xml.xslt,
# which the program sets (the DHCP range). qemu-utils gives qemu-img and
# qemu-io (the integration tests write and read markers in volumes).
pkgs=(libvirt-daemon-system qemu-system-x86 qemu-utils dnsmasq-base xsltproc)

# 1. Packages (a fresh machine has none of them; apt-get update only then).
missing=()  # read again in step 2: only what this script installs is changed
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "libvirt-up: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Lock timeout: another apt run may hold the dpkg lock for a while.
  apt-get -o DPkg::Lock::Timeout=600 update -q
  apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}"
fi

# 2. A libvirt this script just installed must not autostart the package's
# "default" NAT network: it would forward guest traffic off this machine
# (tests create their own isolated networks). A libvirt that was already
# here is the user's: its networks are left exactly as they are.
if [[ " ${missing[*]} " == *" libvirt-daemon-system "* ]]; then
  rm -f /etc/libvirt/qemu/networks/autostart/default.xml
fi

# 3. Daemons (no systemd: run them with -d). virtlogd collects qemu's
# console/stderr logs; libvirtd refuses to start domains without it.
# A daemon keeps every descriptor it inherits: started under
# `flock /tmp/milner-*.lock`, it would hold that lock for as long as it runs.
# daemon runs one with only stdin, stdout and stderr open.
daemon() (
  for fd in /proc/self/fd/*; do
    fd=${fd##*/}
    ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null || true
  done
  exec "$@"
)
mkdir -p /var/log/libvirt
pgrep -x virtlogd >/dev/null || daemon virtlogd -d
if ! pgrep -x libvirtd >/dev/null; then
  # Without journald libvirtd's errors would be lost; send them to a file.
  LIBVIRT_LOG_OUTPUTS="3:file:$log" daemon libvirtd -d
fi

# 4. Bounded wait until the daemon answers on its socket.
for _ in $(seq 1 30); do
  if err=$(virsh -c "$uri" version 2>&1 >/dev/null); then
    echo "libvirt-up: $uri is ready ($(virsh -c "$uri" version | grep -i 'running hypervisor'))"
    exit 0
  fi
  sleep 1
done
echo "libvirt-up: ERROR: 'virsh -c $uri version' still fails after 30s: $err" >&2
echo "libvirt-up: see $log; pgrep: $(pgrep -ax libvirtd || echo 'libvirtd is not running')" >&2
exit 1
