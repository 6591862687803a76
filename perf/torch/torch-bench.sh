#!/usr/bin/env bash
# perf/torch/torch-bench.sh [build-dir]: the libtorch example (apps/examples/torch_cnn.cpp) under
# antdt, 2 ranks, one per core (mpirun --bind-to core), real compute, on antdt-datagen's digits.
#  1. Equal speeds, B = 256 and 1024: REPEATS interleaved runs of the baseline (the same libtorch
#     step with a bare MPI_Allreduce: antdt-bench-torch-baseline), the example under static and
#     under dd. Medians over the runs of each run's median step time and throughput, and the
#     ratios to the baseline's (1.00 = no cost; the target is within 3 %). The example reads as
#     the baseline does, consecutive rows (--no-shuffle-within-shard; SHUFFLE=1 keeps the
#     default shuffle within shards, whose reads cost what the parts' "read" line shows). Then
#     REPEATS paired runs (--loop paired: both loops in the same processes, a step of each in
#     turn), whose ratio of median step times is free of the compute's spread from process to
#     process, which swamps 3 % in the separate runs' ratios. Then one run of each loop with --parts: every part of a step, median wall / thread-CPU ms per
#     step, rank by rank (CPU time is what a part computes itself, whatever else runs on the core).
#  2. Real slowness (root, cgroup v1 cpu controller; perf/cpu-quota.sh): rank 1 in a cgroup
#     capped at QUOTA of a core (period 2 ms, longer under 0.5), for both batches: a sweep of
#     static --fixed-split runs finds the best fixed split, then REPEATS interleaved runs of
#     static, dd and that split; the medians of their throughputs, dd / static and dd / best
#     fixed (per repeat, then the median).
# Knobs: REPEATS (5), STEPS_256 (300), STEPS_1024 (80), QUOTA (0.5), SAMPLES (20000), OUT (a
# folder; default a new one under /tmp), SKIP_QUOTA=1 (part 1 only), SKIP_EQUAL=1 (part 2 only),
# BATCHES ("256 1024"), SHUFFLE=1.
# Real compute: the figures depend on what else runs on the cores (check the load average, which
# the script prints); quote medians, with the machine and the time.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
repeats=${REPEATS:-5}
quota=${QUOTA:-0.5}
batches=${BATCHES:-256 1024}
out=${OUT:-$(mktemp -d /tmp/antdt-torch-bench.XXXXXX)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ANTDT_LOG_LEVEL=warn OMP_NUM_THREADS=1
example=$build/apps/examples/antdt-example-torch-cnn
baseline=$build/perf/torch/antdt-bench-torch-baseline
cmake --build "$build" --target antdt-example-torch-cnn antdt-bench-torch-baseline antdt-datagen >/dev/null \
  || { echo "torch-bench: cannot build the example and the baseline in $build (libtorch found? ANTDT_BUILD_PERF=ON?)" >&2; exit 2; }
for bin in "$example" "$baseline" "$build/apps/antdt-datagen"; do
  [ -x "$bin" ] || { echo "torch-bench: $bin is missing: build antdt-example-torch-cnn and antdt-bench-torch-baseline" >&2; exit 2; }
done
data=$out/digits.h5
[ -f "$data" ] || "$build/apps/antdt-datagen" --kind digits -n "${SAMPLES:-20000}" -o "$data" --seed 5 >/dev/null
bind=(--bind-to core --map-by core)
mpirun -np 2 "${bind[@]}" true >/dev/null 2>&1 || { echo "torch-bench: --bind-to core fails here; unbound"; bind=(); }
read_order=(--no-shuffle-within-shard)
[ -n "${SHUFFLE:-}" ] && read_order=()
steps_for() { if [ "$1" -le 256 ]; then echo "${STEPS_256:-300}"; else echo "${STEPS_1024:-80}"; fi; }
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
median() { python3 -c 'import statistics,sys; print("%.6g" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
ratio() { python3 -c 'import sys; print("%.3f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }

# One run: json batch steps kind [options...]; kind is baseline or antdt. SLOW_CG set: rank 1 runs in it.
run() {
  local json=$1 batch=$2 steps=$3 kind=$4
  shift 4
  local cmd
  if [ "$kind" = baseline ]; then
    cmd=("$baseline" --data "$data" --global-batch "$batch" --steps "$steps" --json "$json" "$@")
  else
    cmd=("$example" --data "$data" --global-batch "$batch" --steps "$steps" --summary-json "$json" --quiet
         --progress never "${read_order[@]}" "$@")
  fi
  if [ -n "${SLOW_CG:-}" ]; then
    cpu_quota_mpirun "$SLOW_CG" "${bind[@]}" -- "${cmd[@]}" >"$json.log" 2>&1
  else
    mpirun -np 2 "${bind[@]}" "${cmd[@]}" >"$json.log" 2>&1
  fi || { echo "torch-bench: a run failed, see $json.log:" >&2; tail -5 "$json.log" >&2; exit 1; }
}

echo "== perf/torch/torch-bench.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $(getconf _NPROCESSORS_ONLN) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   data: $data (digits 1x28x28), output: $out"
echo
if [ -z "${SKIP_EQUAL:-}" ]; then
echo "== 1. equal speeds: antdt against the same libtorch step with a bare MPI_Allreduce (2 ranks, one per core)"
echo "   antdt reads ${read_order[*]:-with the shuffle within shards (SHUFFLE=1)}"
printf "%-6s %-9s %12s %14s %10s %10s\n" B program "step (ms)" "samples/s" "step/base" "thr/base"
for batch in $batches; do
  steps=$(steps_for "$batch")
  declare -A step=() thr=()
  for r in $(seq 1 "$repeats"); do
    for kind in baseline static dd; do
      j=$out/eq-$batch-$kind-$r.json
      if [ $kind = baseline ]; then run "$j" "$batch" "$steps" baseline; else run "$j" "$batch" "$steps" antdt --policy $kind; fi
      step[$kind]+=" $(field "$j" measured_step_seconds)"
      thr[$kind]+=" $(field "$j" throughput)"
    done
  done
  base_step=$(median ${step[baseline]})
  base_thr=$(median ${thr[baseline]})
  for kind in baseline static dd; do
    s=$(median ${step[$kind]})
    t=$(median ${thr[$kind]})
    printf "%-6s %-9s %12.3f %14.1f %10s %10s\n" "$batch" "$kind" "$(python3 -c "print($s*1e3)")" "$t" \
      "$(ratio "$s" "$base_step")" "$(ratio "$t" "$base_thr")"
  done
  unset step thr
done
echo "   paired (antdt-bench-torch-baseline --loop paired): the two loops in the same 2 processes, an antdt"
echo "   step and a bare step in turn, each timed; antdt's median step over the bare loop's, per run, then"
echo "   the median over REPEATS runs (free of libtorch's process-to-process spread; 1.00 = no cost)"
printf "%-6s %-9s %12s %12s %10s %18s\n" B policy "antdt (ms)" "bare (ms)" "ratio" "runs (min-max)"
for batch in $batches; do
  steps=$(steps_for "$batch")
  declare -A ratios=() a_ms=() b_ms=()
  for r in $(seq 1 "$repeats"); do
    for p in static dd; do
      j=$out/paired-$batch-$p-$r.json
      mpirun -np 2 "${bind[@]}" "$baseline" --data "$data" --global-batch "$batch" --steps "$steps" --loop paired \
        --policy $p "${read_order[@]}" --json "$j" >"$j.log" 2>&1 \
        || { echo "torch-bench: a paired run failed, see $j.log" >&2; tail -5 "$j.log" >&2; exit 1; }
      ratios[$p]+=" $(field "$j" step_ratio)"
      a_ms[$p]+=" $(field "$j" antdt_step_seconds)"
      b_ms[$p]+=" $(field "$j" bare_step_seconds)"
    done
  done
  for p in static dd; do
    printf "%-6s %-9s %12.3f %12.3f %10.4f %18s\n" "$batch" "$p" "$(python3 -c "print($(median ${a_ms[$p]})*1e3)")" \
      "$(python3 -c "print($(median ${b_ms[$p]})*1e3)")" "$(median ${ratios[$p]})" \
      "$(python3 -c 'import sys; v=[float(x) for x in sys.argv[1:]]; print("%.4f-%.4f" % (min(v), max(v)))' ${ratios[$p]})"
  done
  unset ratios a_ms b_ms
done
echo "   where the time goes (one run of each loop, static; median ms per step, wall / thread CPU):"
for batch in $batches; do
  steps=$(steps_for "$batch")
  for loop in bare antdt; do
    extra=()
    [ $loop = antdt ] && extra=(--loop antdt --policy static "${read_order[@]}")
    mpirun -np 2 "${bind[@]}" "$baseline" --data "$data" --global-batch "$batch" --steps "$steps" --parts \
      "${extra[@]}" >"$out/parts-$batch-$loop.log" 2>&1 \
      || { echo "torch-bench: a --parts run failed, see $out/parts-$batch-$loop.log" >&2; exit 1; }
    sed -n "s/^PARTS /   B $batch $loop  /p" "$out/parts-$batch-$loop.log" | grep -v "median ms"
  done
done
fi

[ -n "${SKIP_QUOTA:-}" ] && exit 0
echo
source "$root/perf/cpu-quota.sh"
if ! cpu_quota_make antdt-torch-bench "$quota"; then
  echo "== 2. SKIPPED: $CPU_QUOTA_WHY"
  exit 0
fi
echo "== 2. real slowness: rank 1 capped at $quota of a core by a cgroup CPU quota (period $CPU_QUOTA_PERIOD us)"
SLOW_CG=$CPU_QUOTA_CG
printf "%-6s %-22s %14s %10s %10s\n" B policy "samples/s" "dd/this" "efficiency"
for batch in $batches; do
  steps=$(steps_for "$batch")
  # The best fixed split: rank 0 (the free core) takes 50 % to 85 % of B, short runs, the fastest.
  best=0 best_b0=$((batch / 2))
  for pct in 50 55 60 65 70 75 80 85; do
    b0=$((batch * pct / 100))
    j=$out/sweep-$batch-$b0.json
    run "$j" "$batch" $((steps / 2)) antdt --policy static --fixed-split "$b0,$((batch - b0))"
    t=$(field "$j" throughput)
    if python3 -c "import sys; sys.exit(0 if $t > $best else 1)"; then best=$t best_b0=$b0; fi
  done
  fixed="$best_b0,$((batch - best_b0))"
  declare -A thr=() eff=() dd_over=()
  for r in $(seq 1 "$repeats"); do
    for p in static dd fixed; do
      j=$out/slow-$batch-$p-$r.json
      if [ $p = fixed ]; then run "$j" "$batch" "$steps" antdt --policy static --fixed-split "$fixed"
      else run "$j" "$batch" "$steps" antdt --policy $p; fi
      thr[$p]+=" $(field "$j" throughput)"
      eff[$p]+=" $(field "$j" efficiency)"
    done
    dd=$(field "$out/slow-$batch-dd-$r.json" throughput)
    for p in static fixed; do dd_over[$p]+=" $(ratio "$dd" "$(field "$out/slow-$batch-$p-$r.json" throughput)")"; done
  done
  for p in static dd fixed; do
    name=$p
    [ $p = fixed ] && name="best fixed ($fixed)"
    vs="-"
    [ $p != dd ] && vs=$(median ${dd_over[$p]})
    printf "%-6s %-22s %14.1f %10s %10.3f\n" "$batch" "$name" "$(median ${thr[$p]})" "$vs" "$(median ${eff[$p]})"
  done
  unset thr eff dd_over
done
echo "   (dd's final split in its last run: $(field "$out/slow-${batch}-dd-$repeats.json" final_split))"
