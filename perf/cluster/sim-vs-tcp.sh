#!/usr/bin/env bash
# antdt-sim's step time against real antdt-train runs over TCP, on a cluster of network
# namespaces (scripts/slurm/netns-slurm.sh: one node per namespace, a rank per node), at 2, 3
# and 4 nodes, with every link free and with the last node's link rate-limited (tc tbf).
#   perf/cluster/sim-vs-tcp.sh BUILD_DIR [RATE]     (root; RATE default 50mbit)
# Needs antdt-train, antdt-datagen, antdt-sim and antdt-bench-reduce (-DANTDT_BUILD_PERF=ON).
#
# The simulator gets what was measured, nothing fitted to the runs it predicts:
#   - compute: the virtual device's c (each rank waits out b * c), exact by construction;
#   - --overhead: a step's cost beyond compute and network, from a 1-node run (no all-reduce);
#   - --link-alpha, --link-beta: from bare MPI_Allreduce times at 2 nodes (antdt-bench-reduce,
#     4 kB to 16 MB), fitted to the simulator's own 2-rank ring, t = 2 alpha + bytes * beta;
#   - --slow-links: the limited node's link at RATE (beta = 8 / RATE per byte), as a factor,
#     and --link-burst: its token bucket, tbf's 64 kB burst each way (scripts/slurm/netns-slurm.sh);
#   - --gradient-bytes: the model's parameters x 4.
# It prints, per case, the measured step time (the median of rank 0's step wall time over the
# steps after the 5th; the median of REPEATS runs, default 3) and the simulator's prediction
# with two all-reduce models, and their ratios:
#   - mpi: what antdt's reduction is on Open MPI 4.1 (a non-blocking MPI_Iallreduce, which
#     libnbc runs as a binomial reduce and broadcast below 4 ranks or 64 KiB, and, since antdt
#     then sends from a copy, as Rabenseifner's reduce-scatter and all-gather above:
#     docs/benchmarks.md);
#   - auto: the faster of a ring and a tree, as NCCL picks (antdt's reduction on GPUs).
set -euo pipefail
build=$(cd "${1:?BUILD_DIR}" && pwd); rate=${2:-50mbit}
src=$(cd "$(dirname "$0")/../.." && pwd)
netns=$src/scripts/slurm/netns-slurm.sh
for t in apps/antdt-train apps/antdt-datagen apps/antdt-sim perf/compute/antdt-bench-reduce; do
  [ -x "$build/$t" ] || { echo "sim-vs-tcp: $build/$t is missing (build with -DANTDT_BUILD_PERF=ON)" >&2; exit 2; }
done
[[ $rate =~ ^([0-9]+)(k|m|g)bit$ ]] || { echo "sim-vs-tcp: RATE must be like 50mbit" >&2; exit 2; }
case ${BASH_REMATCH[2]} in k) mult=1e3 ;; m) mult=1e6 ;; g) mult=1e9 ;; esac
rate_bps=$(python3 -c "print(${BASH_REMATCH[1]} * $mult)")

D=$(mktemp -d /tmp/antdt-sim-vs-tcp.XXXXXX)
chmod 755 "$D"
cleanup() { "$netns" stop "$D/slurm" >/dev/null 2>&1 || true; rm -rf "$D"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
conf=$(ANTDT_NETNS_OWNER=$$ "$netns" start "$D/slurm" 4)
eval "$conf"
export ANTDT_LOG_LEVEL=warn OPENBLAS_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1

layers=8,256,256,4 c=0.002 per_rank=20 steps=60
"$build/apps/antdt-datagen" -o "$D/train.h5" --samples 4800 --dim 8 --classes 4 >/dev/null
grad_bytes=$(python3 -c "
w = [int(x) for x in '$layers'.split(',')]
print(4 * sum(a * b + b for a, b in zip(w, w[1:])))")

repeats=${REPEATS:-3}
idle() {  # until the previous job has left every node (a step started beside it waits or fails)
  for _ in $(seq 100); do [ -z "$(squeue -h 2>/dev/null)" ] && return 0; sleep 0.1; done
}
# A run (srun ARGS...), tried up to 3 times: 2 of about 150 runs here lost rank 0 to a segfault
# inside Open MPI at start-up (no frame but libc's), not reproduced alone in 16 more.
try_run() {
  local attempt
  for attempt in 1 2 3; do
    idle
    if "$@" >/dev/null 2>"$D/srun.err"; then return 0; fi
    echo "sim-vs-tcp: a run failed (attempt $attempt): $(grep -m1 -E 'error|fault' "$D/srun.err")" >&2
  done
  cat "$D/srun.err" >&2
  exit 1
}
measure() {  # NODES [ENV...]: rank 0's median step wall time (s) of a static run, one rank per node
  local p=$1 i
  shift
  for i in $(seq "$repeats"); do
    try_run env "$@" srun --mpi=pmix --kill-on-bad-exit=1 -N "$p" --ntasks-per-node=1 "$build/apps/antdt-train" \
      --data "$D/train.h5" --layers $layers --global-batch $((per_rank * p)) --steps $steps --policy static \
      --virtual-device $c --no-probe --metrics "$D/m$i.csv" --quiet
  done
  python3 - "$D"/m*.csv <<'PY'
import csv, statistics, sys
runs = []
for path in sys.argv[1:]:
    rows = [r for r in csv.DictReader(open(path)) if r["rank"] == "0" and int(r["step"]) >= 5]
    runs.append(statistics.median(float(r["step_wall_s"]) for r in rows))
print(statistics.median(runs))
PY
  rm -f "$D"/m*.csv
}
predict() {  # NETWORK NODES OVERHEAD ALPHA BETA [SLOW_FACTOR]: the simulator's mean step time (s)
  local network=$1 p=$2 speeds slow=()
  shift
  speeds=$(python3 -c "print(','.join(['1'] * $p))")
  # The limited link's token bucket: netns-slurm.sh limit's tbf burst, 64 kB each way.
  [ -n "${5:-}" ] && slow=(--slow-links "$((p - 1)):$5" --link-burst 65536)
  "$build/apps/antdt-sim" --speeds "$speeds" -B $((per_rank * p)) --steps $steps --policy static --network "$network" \
    --seconds-per-sample $c --overhead "$2" --gradient-bytes "$grad_bytes" --link-alpha "$3" --link-beta "$4" \
    "${slow[@]}" --summary-json "$D/sim.json" >/dev/null
  python3 -c "
import json; p = json.load(open('$D/sim.json'))['policies'][0]; print(p['simulated_seconds'] / p['steps'])"
}

echo "== $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the runs)"
echo "== calibration"
one=$(measure 1)
overhead=$(python3 -c "print(max(0.0, $one - $per_rank * $c))")
echo "1 node: step $one s, compute $(python3 -c "print($per_rank * $c)") s: overhead $overhead s"
idle
srun --mpi=pmix -N 2 --ntasks-per-node=1 "$build/perf/compute/antdt-bench-reduce" > "$D/reduce.txt" 2>"$D/srun.err" ||
  { cat "$D/srun.err" >&2; exit 1; }
read -r alpha beta < <(python3 - "$D/reduce.txt" <<'PY'
import re, sys
pts = []
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 6 and re.fullmatch(r"\d+", f[0]):
        pts.append((int(f[0]) * 4.0, float(f[3]) * 1e-6))  # bytes, bare MPI_Allreduce seconds
    elif pts and not f:
        break
# t = 2 alpha + bytes * beta (the simulator's ring at 2 ranks), fitted in relative error, so
# that the small sizes (the latency) count as much as the large ones (the bandwidth).
saa = sum((2 / t) ** 2 for _, t in pts)
sab = sum((2 / t) * (x / t) for x, t in pts)
sbb = sum((x / t) ** 2 for x, t in pts)
sa, sb = sum(2 / t for _, t in pts), sum(x / t for x, t in pts)
det = saa * sbb - sab * sab
alpha, beta = (sa * sbb - sb * sab) / det, (saa * sb - sab * sa) / det
if alpha < 0:  # no latency to speak of: the bandwidth alone
    alpha, beta = 0.0, sb / sbb
print(alpha, beta)
PY
)
echo "link (2-node all-reduce, 4 kB - 16 MB): alpha $alpha s, beta $beta s/B ($(python3 -c "print(round(1e-6 / $beta, 1))") MB/s)"
slow_factor=$(python3 -c "print((8.0 / $rate_bps) / $beta)")
echo "limited link: $rate = $(python3 -c "print($rate_bps / 8e6)") MB/s, $slow_factor x beta"
echo "gradient: $grad_bytes bytes ($layers); compute $per_rank samples x $c s per rank and step"
echo
printf "%-6s %-8s | %9s | %-20s | %-20s\n" "" "" "" "sim mpi" "sim auto"
printf "%-6s %-8s | %9s | %9s %9s | %9s %9s\n" nodes link measured predicted ratio predicted ratio
for limit in free "$rate"; do
  for p in 2 3 4; do
    factor=""
    if [ "$limit" != free ]; then
      "$netns" limit "$D/slurm" "n$p" "$rate"
      factor=$slow_factor
    fi
    pred=$(predict mpi $p "$overhead" "$alpha" "$beta" "$factor")
    pred_auto=$(predict auto $p "$overhead" "$alpha" "$beta" "$factor")
    meas=$(measure $p)
    [ "$limit" = free ] || "$netns" limit "$D/slurm" "n$p" off
    printf "%-6s %-8s | %9.4f | %9.4f %9.3f | %9.4f %9.3f\n" "$p" "$limit" "$meas" "$pred" \
      "$(python3 -c "print($meas / $pred)")" "$pred_auto" "$(python3 -c "print($meas / $pred_auto)")"
  done
done
echo "step times in seconds (median of $repeats runs); ratio = measured / predicted (1.000: the simulator is exact)"
echo "== load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
