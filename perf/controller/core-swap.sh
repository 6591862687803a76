#!/usr/bin/env bash
# Why two ranks doing the same work report speeds up to 2x apart (issue 18, "honest x_i"):
# does the slowness follow the rank (rank 0's extra work leaking into its compute time) or the
# core it runs on (the machine)? Real compute, 2 ranks, static 256/256, equal speeds, MLP
# 64,256,256,10, B 512, 200 steps; rank 0 on core 0 and rank 1 on core 1, then swapped (a
# rankfile), interleaved REPEATS times. Prints each run's median compute per sample of each
# rank (from --metrics, steps >= 20) and, at the end, the medians per rank and per core. Each
# repeat also runs antdt-bench-compute (no MPI, no rank 0) pinned to core 0 and to core 1 at
# the same time: if its two copies differ too, the gap is the machine's, not antdt's.
#   perf/controller/core-swap.sh [build-dir]      REPEATS=5 OUT=dir
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
repeats=${REPEATS:-5}
out=${OUT:-$(mktemp -d /tmp/antdt-core-swap.XXXXXX)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 ANTDT_LOG_LEVEL=warn
data=$out/train.h5
[ -f "$data" ] || "$build/apps/antdt-datagen" -o "$data" -n 60000 -d 64 -c 10 --seed 7 >/dev/null
host=$(hostname)
printf 'rank 0=%s slot=0\nrank 1=%s slot=1\n' "$host" "$host" >"$out/straight"
printf 'rank 0=%s slot=1\nrank 1=%s slot=0\n' "$host" "$host" >"$out/swapped"
if ! mpirun -np 2 --rankfile "$out/straight" true >/dev/null 2>&1; then
  echo "core-swap: mpirun cannot bind by rankfile here (needs 2 cores)" >&2
  exit 1
fi
for r in $(seq 1 "$repeats"); do
  for b in straight swapped; do
    mpirun -np 2 --rankfile "$out/$b" "$build/apps/antdt-train" --data "$data" --layers 64,256,256,10 \
      --global-batch 512 --steps 200 --optimizer sgd --policy static --quiet --progress never \
      --metrics "$out/$b-$r.csv" >"$out/$b-$r.log" 2>&1
  done
  taskset -c 0 "$build/perf/compute/antdt-bench-compute" 0.3 >"$out/bare0-$r.txt" &
  taskset -c 1 "$build/perf/compute/antdt-bench-compute" 0.3 >"$out/bare1-$r.txt"
  wait
done
python3 - "$out" "$repeats" <<'EOF'
import csv, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
med = statistics.median
by_rank, by_core = {0: [], 1: []}, {0: [], 1: []}
print("real compute, 2 ranks, static 256/256, equal speeds: median us per sample of compute")
print(f"{'run':12} {'rank 0':>14} {'rank 1':>14}")
for r in range(1, repeats + 1):
    for b in ("straight", "swapped"):
        rows = list(csv.DictReader(open(f"{out}/{b}-{r}.csv")))
        us = {}
        for k in (0, 1):
            us[k] = med(float(x["compute_s"]) / int(x["samples"]) * 1e6 for x in rows
                        if int(x["rank"]) == k and int(x["step"]) >= 20 and int(x["samples"]) > 0)
            core = k if b == "straight" else 1 - k
            by_rank[k].append(us[k])
            by_core[core].append(us[k])
        c0, c1 = (0, 1) if b == "straight" else (1, 0)
        print(f"{b + ' ' + str(r):12} {us[0]:8.2f} (core {c0}) {us[1]:8.2f} (core {c1})")
bare = []
for r in range(1, repeats + 1):
    rate = [float(open(f"{out}/bare{c}-{r}.txt").read().split("\n")[2].split()[2]) for c in (0, 1)]
    bare.append(max(rate) / min(rate))
print("bare antdt-bench-compute (64,128,128,10, B 512) on both cores at once, faster/slower core: " +
      " ".join(f"{g:.2f}" for g in bare))
print(f"median by rank: rank 0 {med(by_rank[0]):.2f}, rank 1 {med(by_rank[1]):.2f} us/sample")
print(f"median by core: core 0 {med(by_core[0]):.2f}, core 1 {med(by_core[1]):.2f} us/sample")
print(f"RESULT core-swap runs={2 * repeats} rank0_over_rank1={med(by_rank[0]) / med(by_rank[1]):.3f} "
      f"core0_over_core1={med(by_core[0]) / med(by_core[1]):.3f} "
      f"runs_with_a_1.3x_gap={sum(1 for a, b in zip(by_rank[0], by_rank[1]) if max(a, b) / min(a, b) > 1.3)} "
      f"bare_pairs_with_a_1.3x_gap={sum(1 for g in bare if g > 1.3)} of {repeats}")
EOF
echo "runs in $out"
