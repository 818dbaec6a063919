#!/usr/bin/env bash
# Milner against the Terraform design it replaces, side by side on this
# machine's libvirtd, from a fresh machine in one command:
#
#   bench/run.sh                 # N = 3, 30 and 100, 5 timed runs (P3: 3 at N = 3, 2 at N = 30)
#   BENCH_NODES="3" BENCH_RUNS=1 BENCH_P3_RUNS=1 bench/run.sh   # a quick check
#   BENCH_BEFORE=<git ref> bench/run.sh   # also time Milner as of that commit
#
# It builds the pinned tools (the libvirt plugin and the
# terraform-provider-libvirt binary wired into Terraform with dev_overrides),
# starts libvirt, makes the boot image, and for each N times, in alternating
# order (milnerbench compare):
#   P1 no-op `preview`            vs `terraform plan -refresh=false`
#   P2 `preview --refresh`        vs `terraform plan`
#   P3 `up` from empty            vs `terraform apply` from empty
#   P4 one node's memory changed  vs the same (plan only, no refresh)
#   (above N = 30 only P1, P2 and P4: the graphs are created once, untimed,
#   so the per-node cost of the previews shows as a slope over N = 3/30/100)
#   P5 the user's whole command for one memory change: `milner up --yes
#      --replace cp-2` (guard, gated preview, plan-exact apply) vs
#      `terraform apply -auto-approve` (N = 3 only: a replace per run)
# then the Go benchmark of the program and the delta precision catalog.
# Each tool has its own cluster (bench-m<N> / bench-t<N>), isolated network
# (10.201.<N>.0/24 / 10.202.<N>.0/24, no forward) and pool under
# /var/lib/milner-bench; everything is removed on exit, even on failure.
# Results: bench/results/<UTC time>/ (git-ignored).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nodes=${BENCH_NODES:-"3 30 100"}
runs=${BENCH_RUNS:-5}
# P3 creates everything from empty: 3 rounds at N <= 10, 2 above (0: no P3).
p3runs=${BENCH_P3_RUNS:-3}
p3runs_large=${BENCH_P3_RUNS_LARGE:-2}
# Above this N, P3 is not timed: a create of 100 nodes takes minutes.
p3_max=${BENCH_P3_MAX_NODES:-30}
# Above this N the domains are defined but not started, on both sides.
stopped_above=${BENCH_STOPPED_ABOVE:-10}
work="$root/.tools/bench"
out="$root/bench/results/$(date -u +%Y%m%dT%H%M%SZ)"
image=/var/lib/milner-bench/boot.qcow2
mkdir -p "$work" "$out"
export PATH="/usr/local/go/bin:$PATH" PULUMI_SKIP_UPDATE_CHECK=true CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1

# The engine runs in-process (internal/engine): no Pulumi CLI is needed.
"$root/scripts/tools.sh" libvirt bench
"$root/scripts/libvirt-up.sh"
(cd "$root" && go build -o "$work/milnerbench" ./bench/milnerbench && go build -o "$work/milner" ./cmd/milner)
mb="$work/milnerbench"
if [[ ! -f $image ]]; then
  mkdir -p "$(dirname "$image")"
  qemu-img create -q -f qcow2 "$image" 64M
fi
tf=$(command -v terraform || true)
[[ -n $tf ]] || echo "bench: terraform is not installed: the Terraform half is skipped" >&2
cat >"$work/terraformrc" <<RC
provider_installation {
  dev_overrides { "dmacvicar/libvirt" = "$root/.tools/tf" }
  direct {}
}
RC
export TF_CLI_CONFIG_FILE="$work/terraformrc"

# Before/after in one run: BENCH_BEFORE=<git ref> also times Milner as built
# from that commit (its rows are tagged "(before)"), against the same graphs.
before=""
if [[ -n ${BENCH_BEFORE:-} ]]; then
  rm -rf "$work/before" && mkdir -p "$work/before"
  git -C "$root" archive "$BENCH_BEFORE" | tar -C "$work/before" -xf -
  (cd "$work/before" && go build -o "$work/milnerbench-before" ./bench/milnerbench)
  before="$work/milnerbench-before"
fi

clusters=()
cleanup() {
  ((${#clusters[@]})) && "$root/bench/wipe.sh" "${clusters[@]}" || true
  rm -rf "$work/state"
}
trap cleanup EXIT

{
  echo "# bench $(date -u +%FT%TZ): $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| | Milner s (min–max) | Terraform s (min–max) | Milner/Terraform | Milner peak MiB | Terraform peak MiB |"
  echo "|---|---|---|---|---|---|"
} | tee "$out/table.md"

for n in $nodes; do
  m=bench-m$n t=bench-t$n dir="$work/n$n"
  clusters+=("$m" "$t")
  stopped=false running=true r3=$p3runs
  ((n > stopped_above)) && stopped=true running=false
  ((n > 10)) && r3=$p3runs_large
  ((n > p3_max)) && r3=0
  "$mb" gen -n "$n" -dir "$dir" -image "$image" -running="$running"
  ln -sf "$root"/bench/terraform/*.tf "$root/bench/terraform/dhcp-range.xsl" "$dir/"
  # milner BIN VERB [STACKFILE]: one Milner command line.
  milner() { echo "$1 $2 -repo $root -stack bench$n -state $work/state -stopped=$stopped -config $dir/${3:-stack.yaml}"; }
  terra() { [[ -z $tf ]] || echo "$tf -chdir=$dir $* -input=false -no-color"; }
  cmp() { "$mb" compare -log "$out/log.txt" -out "$out/${1//[^A-Za-z0-9]/}-$n.json" -label "$1 N=$n" "${@:2}" | tee -a "$out/table.md"; }

  "$root/bench/wipe.sh" "$m" "$t"
  rm -f "$dir"/terraform.tfstate* "$dir"/p5.auto.tfvars.json
  # No warm-up for P3 (a create is long): the first round samples the memory.
  p3() {
    cmp "P3$2" -runs "$r3" -warmup=false \
      -a "$(milner "$1" up)" -a-prepare "$root/bench/wipe.sh $m && $(milner "$1" reset)" \
      -b "$(terra apply -auto-approve)" -b-prepare "$root/bench/wipe.sh $t && rm -f $dir/terraform.tfstate*"
  }
  if ((r3 > 0)); then
    p3 "$mb" ""
  else # BENCH_P3_RUNS*=0: just create both graphs, untimed
    $(milner "$mb" reset) && $(milner "$mb" up) >>"$out/log.txt" 2>&1
    [[ -z $tf ]] || $(terra apply -auto-approve) >>"$out/log.txt" 2>&1
  fi
  # Both graphs now exist: the no-op checks must plan nothing.
  $(milner "$mb" preview) 2>&1 | grep -q 'milnerbench preview: same=[0-9]*$' || { echo "bench: Milner's no-op preview plans changes" >&2; exit 1; }
  [[ -z $tf ]] || $(terra plan -refresh=false -detailed-exitcode) >/dev/null || { echo "bench: Terraform's no-op plan plans changes" >&2; exit 1; }
  for bin in $before "$mb"; do
    tag=""
    if [[ $bin != "$mb" ]]; then
      tag=" (before)"
      # At large N a create takes minutes: the gain is per run, not per node.
      ((n > 10 || r3 == 0)) || p3 "$bin" "$tag"
    fi
    cmp "P1$tag" -runs "$runs" -a "$(milner "$bin" preview)" -b "$(terra plan -refresh=false)"
    cmp "P2$tag" -runs "$runs" -a "$(milner "$bin" 'preview -refresh')" -b "$(terra plan)"
    cmp "P4$tag" -runs "$runs" -a "$(milner "$bin" preview stack-p4.yaml)" -b "$(terra plan -refresh=false -var-file=p4.tfvars.json)"
  done
  if ((n <= 3)) && [[ -z $before ]]; then
    # The milner binary on the bench stack's project (milnerbench wrote it
    # under the state directory), the same backend and passphrase.
    cmp P5 -runs "$runs" \
      -a "env PATH=$root/.tools/bin:$PATH PULUMI_BACKEND_URL=file://$work/state PULUMI_CONFIG_PASSPHRASE=milner-bench $work/milner up --stack bench$n --dir $work/state/project --yes --replace cp-2" \
      -a-prepare "$mb flip -repo $root -stack bench$n -state $work/state -config $dir/stack.yaml -other $dir/stack-p4.yaml" \
      -b "$(terra apply -auto-approve)" -b-prepare "$mb flip-tf -dir $dir"
  fi
  "$root/bench/wipe.sh" "$m" "$t"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/table.md"

cd "$root"
go test -run '^$' -bench BenchmarkProgram -benchmem -count 1 ./stacks/ | tee "$out/program-bench.txt"
# The catalog: substrate changes on the real engine, Talos/app changes under mocks.
clusters+=(bench-cat)
go test -tags benchengine -count 1 -v -run TestCatalog ./bench/catalog/ | grep -E 'delta precision|^ *(--- |ok|FAIL)' | tee "$out/catalog.txt"
echo "bench: results in $out"
