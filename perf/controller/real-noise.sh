#!/usr/bin/env bash
# dd on real, noisy compute (issue 18): 2 real ranks, one per core, antdt-train without a
# virtual device, MLP 64,256,256,10, global batch 512, SGD, synthetic 60k x 64 data from
# antdt-datagen. Speeds 1,0.5 (stretch emulation: a rank's measured compute stretched to
# compute / speed) and 1,1. Policies static, dd, the best fixed split found offline (a
# sweep of static --fixed-split runs before the measurement), nd (pooled steps: the ranks
# claim chunks of each step until B are claimed) and nd-first (nd whose first chunk of a step
# is 3/4 of the rank's share: --nd-first-chunk 0.75), all interleaved, REPEATS times.
# Prints the medians of: efficiency (ideal / wall, docs/controller.md "Efficiency"), plan
# changes per 100 steps after step 50, the cost model's median prediction error per step,
# throughput, dd / best-fixed and dd / static (per repeat, then the median), dd / static in
# efficiency (each run against its own sum x_i, so that the machine's drift between the two
# runs cancels), and the ratio of the two ranks' measured x_i (1 with equal speeds if x_i is
# honest). From dd's per-step
# metrics (--metrics) it splits the efficiency in two exact factors, eff = (1 - f) * balance:
#   f, the non-compute part of the step: sum_k (wall_k - max_i compute_ik) / sum_k wall_k
#     (data waits, the reduction, the control exchange, the optimizer update);
#   balance: sum_k ideal_k / sum_k max_i compute_ik, how close the slowest rank's compute is to
#     the ideal one (it holds both the plan's error and each step's unpredictable jitter).
# The offline sweep spans wide splits: this machine's cores are not equal (core 0 often runs at
# half speed: perf/controller/core-swap.sh), so the best split moves between sittings.
#   perf/controller/real-noise.sh [build-dir]      REPEATS=5 STEPS=400 BATCH=512 OUT=dir
# BATCH sets the global batch (the sweep's candidate splits scale with it): the non-compute
# part of a step (the reduction, the control exchange, the update) is a fixed cost, so it is a
# smaller part of a larger batch's step.
# Real compute: the figures depend on what else runs on the machine's cores; quote medians.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
repeats=${REPEATS:-5}
steps=${STEPS:-400}
batch=${BATCH:-512}
out=${OUT:-$(mktemp -d /tmp/antdt-real-noise.XXXXXX)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 ANTDT_LOG_LEVEL=warn
train=$build/apps/antdt-train
data=$out/train.h5
[ -f "$data" ] || "$build/apps/antdt-datagen" -o "$data" -n 60000 -d 64 -c 10 --seed 7 >/dev/null
# One rank per core, bound: two unbound ranks can share a core while the other runs something
# else, and a rank's compute then holds time that is not its compute.
bind=(--bind-to core --map-by core)
mpirun -np 2 "${bind[@]}" true >/dev/null 2>&1 || bind=()
run() {  # json steps speeds policy [extra...]
  local json=$1 n=$2 speeds=$3 policy=$4
  shift 4
  mpirun -np 2 "${bind[@]}" "$train" --data "$data" --layers 64,256,256,10 --global-batch "$batch" \
    --steps "$n" --optimizer sgd --policy "$policy" --emulate-speed "$speeds" --quiet \
    --progress never --summary-json "$json" "$@" >"$json.log" 2>&1
}
throughput() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["throughput"])' "$1"; }

# Offline: the best fixed split of each speed pair, the highest throughput of 2
# short static runs per candidate (their mean) (b_0 of 512, scaled to BATCH; ideal 341 for
# 1,0.5 and 256 for 1,1).
declare -A best
for speeds in 1,0.5 1,1; do
  if [ "$speeds" = 1,0.5 ]; then cands="256 288 320 336 352 368 384 400 416 448"; else cands="208 224 240 256 272 288 304 320"; fi
  top=0 top_b=$((batch / 2))
  for c in $cands; do
    b=$((c * batch / 512))
    t=()
    for k in 1 2; do
      run "$out/sweep-$speeds-$b-$k.json" 200 "$speeds" static --fixed-split "$b,$((batch - b))"
      t+=("$(throughput "$out/sweep-$speeds-$b-$k.json")")
    done
    m=$(python3 -c 'import sys; v=list(map(float, sys.argv[1:])); print(sum(v) / len(v))' "${t[@]}")
    if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)' "$m" "$top"; then
      top=$m top_b=$b
    fi
  done
  best[$speeds]="$top_b,$((batch - top_b))"
  echo "offline sweep, speeds $speeds: best fixed split ${best[$speeds]} ($top samples/s)"
done

# Interleaved: every repeat runs every (speeds, policy) once, in turn.
for r in $(seq 1 "$repeats"); do
  for speeds in 1,0.5 1,1; do
    # Every policy writes its per-step metrics, as dd's must for the split below: on rank 0
    # that is a few microseconds a step, about 1 % of a 1.3 ms step at B 512, and a policy
    # without it would be compared on a lighter loop.
    run "$out/$speeds-static-$r.json" "$steps" "$speeds" static --metrics "$out/$speeds-static-$r.csv"
    run "$out/$speeds-dd-$r.json" "$steps" "$speeds" dd --metrics "$out/$speeds-dd-$r.csv"
    run "$out/$speeds-fixed-$r.json" "$steps" "$speeds" static --fixed-split "${best[$speeds]}" \
      --metrics "$out/$speeds-fixed-$r.csv"
    run "$out/$speeds-nd-$r.json" "$steps" "$speeds" nd --metrics "$out/$speeds-nd-$r.csv"
    run "$out/$speeds-nd-first-$r.json" "$steps" "$speeds" nd --nd-first-chunk 0.75 --metrics "$out/$speeds-nd-first-$r.csv"
  done
  echo "repeat $r of $repeats done"
done

python3 - "$out" "$repeats" "$steps" "${best[1,0.5]}" "${best[1,1]}" "$batch" <<'EOF'
import collections, csv, json, statistics, sys
out, repeats, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[6])
best = {"1,0.5": sys.argv[4], "1,1": sys.argv[5]}
med = statistics.median

def split(path):  # (f, balance) of one run's per-step metrics
    steps = collections.defaultdict(list)
    for row in csv.DictReader(open(path)):
        steps[int(row["step"])].append(row)
    wall = comp = ideal = 0.0
    for rows in steps.values():
        timed = [(int(x["samples"]), float(x["compute_s"])) for x in rows]
        timed = [(b, c) for b, c in timed if b > 0 and c > 0]
        if not timed:
            continue
        wall += float(rows[0]["step_wall_s"])
        comp += max(c for _, c in timed)
        ideal += sum(b for b, _ in timed) / sum(b / c for b, c in timed)
    return 1.0 - comp / wall, ideal / comp
print(f"real compute, 2 ranks, MLP 64,256,256,10, B {batch}, {steps} steps, medians of {repeats} interleaved repeats")
print(f"{'speeds':7} {'policy':13} {'samples/s':>10} {'eff':>6} {'plans/100':>9} {'model_err':>9} {'x0/x1':>6}")
for speeds in ("1,0.5", "1,1"):
    runs = {p: [json.load(open(f"{out}/{speeds}-{p}-{r}.json")) for r in range(1, repeats + 1)]
            for p in ("static", "dd", "fixed", "nd", "nd-first")}
    for p, rs in runs.items():
        late = [100.0 * sum(1 for q in s["plans"] if q["version"] > 0 and q["effective_step"] > 50) / max(1, steps - 50)
                for s in rs]
        xr = [s["rank_throughput"][0] / s["rank_throughput"][1] for s in rs if s["rank_throughput"][1] > 0]
        name = p if p != "fixed" else "fixed " + best[speeds]
        print(f"{speeds:7} {name:13} {med(s['throughput'] for s in rs):10.0f} {med(s['efficiency'] for s in rs):6.3f} "
              f"{med(late):9.2f} {med(s['model_error_median'] for s in rs):9.3f} {med(xr):6.3f}")
    dd_fixed = med(d["throughput"] / f["throughput"] for d, f in zip(runs["dd"], runs["fixed"]))
    dd_static = med(d["throughput"] / s["throughput"] for d, s in zip(runs["dd"], runs["static"]))
    # The same comparison per unit of each run's own measured speed (its ideal, sum x_i): the
    # machine's drift between two runs cancels, which it does not in dd_over_static.
    dd_static_eff = med(d["efficiency"] / s["efficiency"] for d, s in zip(runs["dd"], runs["static"]))
    dd_nd = med(d["throughput"] / n["throughput"] for d, n in zip(runs["dd"], runs["nd"]))
    first_dd = med(n["throughput"] / d["throughput"] for d, n in zip(runs["dd"], runs["nd-first"]))
    parts = [split(f"{out}/{speeds}-dd-{r}.csv") for r in range(1, repeats + 1)]
    print(f"{speeds:7} dd: non-compute part f {med(p[0] for p in parts):.3f} "
          f"(cap 1-f {med(1 - p[0] for p in parts):.3f}), balance {med(p[1] for p in parts):.3f} "
          f"(runs {min(p[1] for p in parts):.3f}-{max(p[1] for p in parts):.3f})")
    print(f"RESULT real-noise speeds={speeds} dd_eff={med(s['efficiency'] for s in runs['dd']):.3f} "
          f"dd_noncompute={med(p[0] for p in parts):.3f} dd_balance={med(p[1] for p in parts):.3f} "
          f"dd_over_fixed={dd_fixed:.3f} dd_over_static={dd_static:.3f} dd_over_static_eff={dd_static_eff:.3f} "
          f"dd_over_nd={dd_nd:.3f} nd_first_over_dd={first_dd:.3f} "
          f"dd_model_err={med(s['model_error_median'] for s in runs['dd']):.3f}")
EOF
echo "runs in $out"
