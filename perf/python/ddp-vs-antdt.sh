#!/usr/bin/env bash
# perf/python/ddp-vs-antdt.sh [build-dir]: the anchor. The same CNN, data and global batch
# (perf/python/cnn_bench.py: the Python example's model on antdt-datagen's digits, 28 x 28) under
# torch.nn.parallel.DistributedDataParallel (gloo, MASTER_ADDR 127.0.0.1) and under antdt, at 2
# ranks, one per core (mpirun --bind-to core), real compute.
#  1. Equal speeds: REPEATS interleaved runs of DDP, antdt static and antdt dd. Medians of the
#     throughputs, and of each repeat's antdt / DDP (the target: within 5 %). Then one run of
#     DDP and one of antdt static with --parts: every part of a step, median wall / thread-CPU
#     ms per step, rank by rank (cnn_bench.py's docstring names the parts).
#  2. Real slowness (root, cgroup v1 cpu controller; perf/cpu-quota.sh): rank 1 in a cgroup capped
#     at QUOTA of a core (period 2 ms, or longer for a quota under 1 ms). Each rank's own speed is
#     measured alone on its core under the same cap (cnn_bench --mode speed, both at once) at B/2
#     and B/8 samples a step, and fitted as a fixed part a step plus a part per sample; a sweep
#     of short static runs (--fixed-split, rank 1 at 5 % to 50 % of B) finds the best fixed split;
#     then REPEATS interleaved runs of DDP, antdt static, antdt dd and that split. The gain
#     dd / DDP is printed beside the limit those speeds allow: DDP's step waits for the slow
#     rank's B/2 samples, a perfect balance gives each rank the share that ends with the others,
#     fixed parts included; and beside (x0 + x1) / (2 min(x0, x1)), the limit without them.
# Knobs: REPEATS (5), STEPS (150), BATCH (256), QUOTA (0.5), SAMPLES (20000), SKIP_EQUAL=1,
# SKIP_QUOTA=1, PYTHON (the module's interpreter: ANTDT_PYTHON, default /usr/bin/python3),
# OUT (a folder).
# Real compute: the figures depend on what else runs on the cores; the script prints the load
# average. Quote medians, with the machine and the time. On cores shared with other work the
# cap must be below a process's share of its core to slow rank 1 at all (x1 / x0 says so): at a
# load average of 12 on 2 cores, 0.5 and 0.25 did not, 0.1 did (docs/python.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
repeats=${REPEATS:-5}
steps=${STEPS:-150}
batch=${BATCH:-256}
quota=${QUOTA:-0.5}
py=${PYTHON:-/usr/bin/python3}
out=${OUT:-$(mktemp -d /tmp/antdt-ddp-bench.XXXXXX)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ANTDT_LOG_LEVEL=warn OMP_NUM_THREADS=1
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH} MASTER_ADDR=127.0.0.1
bench=$root/perf/python/cnn_bench.py
cmake --build "$build" --target antdt_python antdt-datagen >/dev/null \
  || { echo "ddp-vs-antdt: cannot build the Python module and antdt-datagen in $build" >&2; exit 2; }
"$py" -c "import antdt, torch, torch.distributed" 2>/dev/null \
  || { echo "ddp-vs-antdt: $py cannot import antdt and torch (PYTHONPATH=$PYTHONPATH)" >&2; exit 2; }
data=$out/digits.h5
[ -f "$data" ] || "$build/apps/antdt-datagen" --kind digits -n "${SAMPLES:-20000}" -o "$data" --seed 5 >/dev/null
bind=(--bind-to core --map-by core)
mpirun -np 2 "${bind[@]}" true >/dev/null 2>&1 || { echo "ddp-vs-antdt: --bind-to core fails here; unbound"; bind=(); }
median() { "$py" -c 'import statistics,sys; print("%.6g" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
ratio() { "$py" -c 'import sys; print("%.3f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }
# A field of the RESULT line(s) in a log: field log name [rank]
field() { grep "^RESULT mode=" "$1" | grep -- "${3:+rank=$3 }" | sed -n "s/.* $2=\([^ ]*\).*/\1/p" | head -1; }

# One run: log mode [options...]. SLOW_CG set: rank 1 runs in that cgroup.
port=$((29500 + $$ % 1000))
run() {
  local log=$1 mode=$2
  shift 2
  port=$((port + 1))
  local cmd=("$py" "$bench" --mode "$mode" --data "$data" --batch "$batch" --steps "$steps" "$@")
  if [ -n "${SLOW_CG:-}" ]; then
    MASTER_PORT=$port cpu_quota_mpirun "$SLOW_CG" "${bind[@]}" -x MASTER_ADDR -x MASTER_PORT -- "${cmd[@]}" >"$log" 2>&1
  else
    MASTER_PORT=$port mpirun -np 2 "${bind[@]}" -x MASTER_ADDR -x MASTER_PORT "${cmd[@]}" >"$log" 2>&1
  fi || { echo "ddp-vs-antdt: a run failed, see $log:" >&2; tail -5 "$log" >&2; exit 1; }
}

echo "== perf/python/ddp-vs-antdt.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $(getconf _NPROCESSORS_ONLN) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   $("$py" -c 'import torch, sys; print("PyTorch", torch.__version__, "Python", sys.version.split()[0])'), data: $data (digits 1x28x28), B $batch, $steps steps (10 warm-up), $repeats repeats, output: $out"
echo
# One repeat of DDP, antdt static and antdt dd, logs <tag>-<mode>-<r>.log: appends each one's
# throughput to thr[mode] and antdt's / DDP's to over[static|dd].
declare -A thr=() over=()
repeat() {
  local tag=$1 r=$2 m
  run "$out/$tag-ddp-$r.log" ddp
  run "$out/$tag-static-$r.log" antdt --policy static
  run "$out/$tag-dd-$r.log" antdt --policy dd
  for m in ddp static dd; do thr[$m]+=" $(field "$out/$tag-$m-$r.log" samples_per_s)"; done
  for m in static dd; do
    over[$m]+=" $(ratio "$(field "$out/$tag-$m-$r.log" samples_per_s)" "$(field "$out/$tag-ddp-$r.log" samples_per_s)")"
  done
}

if [ -z "${SKIP_EQUAL:-}" ]; then
  echo "== 1. equal speeds: antdt against DistributedDataParallel (gloo), 2 ranks, one per core"
  for r in $(seq 1 "$repeats"); do repeat eq "$r"; done
  printf "%-14s %12s %12s   %s\n" program "samples/s" "/ DDP" "per repeat"
  printf "%-14s %12.1f %12s   %s\n" DDP "$(median ${thr[ddp]})" 1 "${thr[ddp]}"
  for m in static dd; do
    printf "%-14s %12.1f %12s   %s\n" "antdt $m" "$(median ${thr[$m]})" "$(median ${over[$m]})" "${over[$m]}"
  done
  echo "   load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "   where the time goes (one run each; median ms per step, wall/cpu):"
  run "$out/eq-parts-ddp.log" ddp --parts
  run "$out/eq-parts-antdt.log" antdt --policy static --parts
  grep -h "^PARTS" "$out/eq-parts-ddp.log" "$out/eq-parts-antdt.log" | sed 's/^PARTS /   /; s/ (median ms per step, wall\/cpu)//'
  thr=() over=()
  echo
fi
[ -n "${SKIP_QUOTA:-}" ] && exit 0
# (perf/cpu-quota.sh: a period of 2 ms, so that a step of a few ms sees a steady share; longer
# where the quota would fall below the kernel's least, 1 ms: QUOTA 0.25, 4 ms)
source "$root/perf/cpu-quota.sh"
if ! cpu_quota_make antdt-ddp-bench "$quota"; then
  echo "== 2. SKIPPED: $CPU_QUOTA_WHY"
  exit 0
fi
SLOW_CG=$CPU_QUOTA_CG
echo "== 2. real slowness: rank 1 capped at $quota of a core by a cgroup CPU quota (period $CPU_QUOTA_PERIOD us)"
# Each rank's own speed, alone on its core under the same cap (both at once), at two shares a
# step: B/2 (DDP's) and B/8. A step costs a fixed part (the optimizer's update, the Python around
# it) plus a part per sample, and on the capped rank both are slowed, so the per-sample speed at
# B/2 alone overstates what a small share runs at: the fit t_i(n) = a_i + n / x_i gives the limit
# with fixed costs, B / T* where sum_i (T* - a_i) x_i = B, against DDP's max_i t_i(B/2).
x0s="" x1s="" t0s="" t1s="" s0s="" s1s=""
small=$((batch / 8))
for r in $(seq 1 "$repeats"); do
  run "$out/slow-speed-$r.log" speed
  run "$out/slow-speed-small-$r.log" speed --share "$small"
  x0s+=" $(field "$out/slow-speed-$r.log" samples_per_s 0)"
  x1s+=" $(field "$out/slow-speed-$r.log" samples_per_s 1)"
  t0s+=" $(field "$out/slow-speed-$r.log" step_ms 0)"
  t1s+=" $(field "$out/slow-speed-$r.log" step_ms 1)"
  s0s+=" $(field "$out/slow-speed-small-$r.log" step_ms 0)"
  s1s+=" $(field "$out/slow-speed-small-$r.log" step_ms 1)"
done
x0=$(median $x0s)
x1=$(median $x1s)
limit=$("$py" -c "print('%.3f' % (($x0 + $x1) / (2 * min($x0, $x1))))")
read -r limit_fixed model_split fit_text < <("$py" - "$batch" "$small" "$(median $t0s)" "$(median $t1s)" \
  "$(median $s0s)" "$(median $s1s)" <<'PY'
import sys
B, n_small = int(sys.argv[1]), int(sys.argv[2])
t_big, t_small = [float(v) for v in sys.argv[3:5]], [float(v) for v in sys.argv[5:7]]
n_big = B / 2
fits = []
for tb, ts in zip(t_big, t_small):
    c = max((tb - ts) / (n_big - n_small), 1e-9)  # ms per sample
    fits.append((max(ts - n_small * c, 0.0), c))    # fixed ms a step, ms per sample
lo, hi = 0.0, max(a + B * c for a, c in fits)
for _ in range(100):                               # T*: sum_i (T - a_i) / c_i = B
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if sum(max(0.0, (mid - a) / c) for a, c in fits) < B else (lo, mid)
ddp = max(a + n_big * c for a, c in fits)
split = [round(max(0.0, (hi - a) / c)) for a, c in fits]
text = "; ".join("rank %d %.2f ms + %.4f ms a sample" % (i, a, c) for i, (a, c) in enumerate(fits))
print("%.3f" % (ddp / hi), ",".join(map(str, split)), text.replace(" ", "_"))
PY
)
echo "   each rank alone on its core (samples/s at B/2 a step, medians): rank 0 $x0, rank 1 (capped) $x1 -> relative speed $(ratio "$x1" "$x0")"
echo "   a step alone, fitted from B/2 and B/8 samples: ${fit_text//_/ }; the best split by that fit $model_split"
# The best fixed split, found offline: short static runs with rank 1 given 5 % to 50 % of B.
best=0 fixed="$((batch / 2)),$((batch / 2))"
for pct in 5 8 11 14 17 20 25 30 40 50; do
  b1=$((batch * pct / 100))
  b1=$((b1 < 1 ? 1 : b1))
  run "$out/slow-sweep-$b1.log" antdt --policy static --fixed-split "$((batch - b1)),$b1"
  t=$(field "$out/slow-sweep-$b1.log" samples_per_s)
  if "$py" -c "import sys; sys.exit(0 if $t > $best else 1)"; then best=$t fixed="$((batch - b1)),$b1"; fi
done
for r in $(seq 1 "$repeats"); do
  repeat slow "$r"
  run "$out/slow-fixed-$r.log" antdt --policy static --fixed-split "$fixed"
  thr[fixed]+=" $(field "$out/slow-fixed-$r.log" samples_per_s)"
  over[fixed]+=" $(ratio "$(field "$out/slow-fixed-$r.log" samples_per_s)" "$(field "$out/slow-ddp-$r.log" samples_per_s)")"
  over[ddfixed]+=" $(ratio "$(field "$out/slow-dd-$r.log" samples_per_s)" "$(field "$out/slow-fixed-$r.log" samples_per_s)")"
done
printf "%-22s %12s %8s %12s   %s\n" program "samples/s" "/ DDP" "limit" "per repeat (/ DDP)"
printf "%-22s %12.1f %8s %12s   %s\n" DDP "$(median ${thr[ddp]})" 1 - "${thr[ddp]}"
printf "%-22s %12.1f %8s %12s   %s\n" "antdt static" "$(median ${thr[static]})" "$(median ${over[static]})" 1 "${over[static]}"
printf "%-22s %12.1f %8s %12s   %s\n" "antdt best fixed split" "$(median ${thr[fixed]})" "$(median ${over[fixed]})" "($fixed)" "${over[fixed]}"
printf "%-22s %12.1f %8s %12s   %s\n" "antdt dd" "$(median ${thr[dd]})" "$(median ${over[dd]})" "$limit_fixed" "${over[dd]}"
echo "   limit: $limit_fixed with each rank's fixed cost a step (the fit above), $limit from the speeds at B/2 alone;"
echo "   dd / best fixed split, per repeat: ${over[ddfixed]} (median $(median ${over[ddfixed]}))"
echo "   dd's final split (last repeat): $(field "$out/slow-dd-$repeats.log" split); load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
# Other processes on the cores take a share of rank 0's core too: when they take more than the
# cap does, the cap hardly slows rank 1 against rank 0, and dd has little to gain.
"$py" -c "import sys; sys.exit(0 if $x1 / $x0 > 0.8 else 1)" \
  && echo "   NOTE: the capped rank ran at $(ratio "$x1" "$x0") of rank 0's speed: other load on the cores outweighs the cap here"
exit 0
