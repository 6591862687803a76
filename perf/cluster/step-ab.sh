#!/usr/bin/env bash
# One build against another on a cluster of network namespaces (scripts/slurm/netns-slurm.sh:
# one node per namespace, a rank per node, TCP between them): the median step time of
# antdt-train (static, virtual device) with each build, in interleaved rounds, with every link
# free and with the last node's link rate-limited (tc tbf). Used for the reduction's algorithm
# (docs/compute.md, "The all-reduce algorithm on Open MPI"): a build before the change against
# one after it.
#   perf/cluster/step-ab.sh BUILD_A BUILD_B     (root)
#   NODES=4 RATE=50mbit ROUNDS=3 LAYERS="8,256,256,4 8,1024,1024,4" STEPS=60
#   ENV_A="VAR=VALUE ..." ENV_B="..."   the environment of each side's runs (one build twice
#                                      against two settings: BUILD_A and BUILD_B the same)
# Prints, per case and round, rank 0's median step wall time (steps after the 5th) with each
# build and A / B (above 1: B is faster), then the median of the rounds' ratios.
set -euo pipefail
a=$(cd "${1:?BUILD_A}" && pwd); b=$(cd "${2:?BUILD_B}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
netns=$src/scripts/slurm/netns-slurm.sh
nodes=${NODES:-4} rate=${RATE:-50mbit} rounds=${ROUNDS:-3} steps=${STEPS:-60}
read -r -a layer_sets <<<"${LAYERS:-8,256,256,4 8,1024,1024,4}"
for build in "$a" "$b"; do
  for t in apps/antdt-train apps/antdt-datagen; do
    [ -x "$build/$t" ] || { echo "step-ab: $build/$t is missing" >&2; exit 2; }
  done
done
D=$(mktemp -d /tmp/antdt-step-ab.XXXXXX)
chmod 755 "$D"
cleanup() { "$netns" stop "$D/slurm" >/dev/null 2>&1 || true; rm -rf "$D"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
conf=$(ANTDT_NETNS_OWNER=$$ "$netns" start "$D/slurm" "$nodes")
eval "$conf"
export ANTDT_LOG_LEVEL=warn OPENBLAS_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
"$a/apps/antdt-datagen" -o "$D/train.h5" --samples 4800 --dim 8 --classes 4 >/dev/null
read -r -a env_a <<<"${ENV_A:-}"
read -r -a env_b <<<"${ENV_B:-}"
step() {  # BUILD LAYERS [VAR=VALUE...]: rank 0's median step wall time (s); a run is tried up to 3
  local build=$1 layers=$2 attempt   # times (Open MPI's TCP start-up fails now and then under load)
  shift 2
  for attempt in 1 2 3; do
    env "$@" srun --mpi=pmix --kill-on-bad-exit=1 -N "$nodes" --ntasks-per-node=1 "$build/apps/antdt-train" \
      --data "$D/train.h5" --layers "$layers" --global-batch $((20 * nodes)) --steps "$steps" --policy static \
      --virtual-device 0.002 --no-probe --metrics "$D/m.csv" --quiet >/dev/null 2>"$D/err" && break
    [ "$attempt" = 3 ] && { cat "$D/err" >&2; exit 1; }
  done
  python3 - "$D/m.csv" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["rank"] == "0" and int(r["step"]) >= 5]
print("%.4f" % statistics.median(float(r["step_wall_s"]) for r in rows))
PY
}
echo "== $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg); A = $a ${ENV_A:-}, B = $b ${ENV_B:-}; $nodes nodes"
for link in free "$rate"; do
  [ "$link" = free ] || "$netns" limit "$D/slurm" "n$nodes" "$rate"
  for layers in "${layer_sets[@]}"; do
    ratios=()
    for i in $(seq "$rounds"); do
      ta=$(step "$a" "$layers" "${env_a[@]}"); tb=$(step "$b" "$layers" "${env_b[@]}")
      ratios+=("$(python3 -c "print(round($ta / $tb, 3))")")
      echo "$link $layers round $i: A $ta s, B $tb s, A / B ${ratios[-1]}"
    done
    echo "$link $layers: median A / B $(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(((rounds + 1) / 2))p")"
  done
  [ "$link" = free ] || "$netns" limit "$D/slurm" "n$nodes" off
done
echo "== load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
