#!/usr/bin/env bash
# perf/session/step-parts.sh BUILD [BUILD2 ...]: where a step's time goes in antdt-train, real
# compute, 2 ranks bound to one core each, equal speeds, the MLP 64,256,256,10, B = 512, static
# (no probe, no plan changes). Each run writes --metrics (one row per step and rank: compute,
# data wait, reduction, the step's wall time on rank 0); per run, the median over the steps after
# WARMUP of each part, averaged over the two ranks, and "the rest" = wall - compute - data -
# reduction: the control exchange, the update, the step's bookkeeping. With several build
# directories (say an older commit's and today's) the runs are interleaved, REPEATS rounds, and
# the medians over the rounds are printed side by side: the same script before and after.
# Knobs: REPEATS (5), STEPS (400), WARMUP (50), SAMPLES (40000), BATCH (512), LAYERS, POLICY (static).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BUILD [BUILD2 ...]" >&2; exit 2; }
repeats=${REPEATS:-5} steps=${STEPS:-400} warmup=${WARMUP:-50} samples=${SAMPLES:-40000}
batch=${BATCH:-512} layers=${LAYERS:-64,256,256,10} policy=${POLICY:-static}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
builds=()
for b in "$@"; do
  b=$(cd "$b" && pwd)
  [ -x "$b/apps/antdt-train" ] || { echo "step-parts: no apps/antdt-train in $b" >&2; exit 2; }
  builds+=("$b")
done
out=$(mktemp -d /tmp/antdt-step-parts.XXXXXX)
"${builds[0]}/apps/antdt-datagen" -o "$out/data.h5" --samples "$samples" --dim 64 --classes 10 >/dev/null
echo "# step parts: 2 ranks (--bind-to core), MLP $layers, B $batch, $policy, $steps steps ($warmup warm-up), $repeats rounds"
echo "# $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
for r in $(seq 1 "$repeats"); do
  for i in "${!builds[@]}"; do
    m="$out/metrics-$i-$r.csv"
    mpirun -np 2 --bind-to core "${builds[$i]}/apps/antdt-train" --data "$out/data.h5" --layers "$layers" \
      --global-batch "$batch" --steps "$steps" --policy "$policy" --metrics "$m" --quiet >"$out/run-$i-$r.log" 2>&1 ||
      { echo "step-parts: the run in ${builds[$i]} failed:"; tail -5 "$out/run-$i-$r.log"; exit 1; }
  done
done
python3 - "$out" "$repeats" "$warmup" "${builds[@]}" <<'PY'
import csv, statistics as st, sys
out, repeats, warmup, builds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
parts = ("wall", "compute", "data", "reduce", "rest")
def one(path):
    rows = [r for r in csv.DictReader(open(path)) if int(r["step"]) >= warmup]
    per = {}
    for rank in sorted({r["rank"] for r in rows}):
        mine = [r for r in rows if r["rank"] == rank]
        f = lambda k: [float(r[k]) * 1e3 for r in mine]
        wall, comp, data, red = f("step_wall_s"), f("compute_s"), f("data_wait_s"), f("reduce_s")
        rest = [w - c - d - x for w, c, d, x in zip(wall, comp, data, red)]
        for k, v in zip(parts, (wall, comp, data, red, rest)):
            per.setdefault(k, []).append(st.median(v))
    return {k: sum(v) / len(v) for k, v in per.items()}
res = {i: [one("%s/metrics-%d-%d.csv" % (out, i, r)) for r in range(1, repeats + 1)] for i in range(len(builds))}
print("%-10s" % "ms/step" + "".join("%14s" % ("build %d" % i) for i in range(len(builds))))
for k in parts:
    print("%-10s" % k + "".join("%14.3f" % st.median(x[k] for x in res[i]) for i in range(len(builds))))
for i, b in enumerate(builds):
    rest = [x["rest"] for x in res[i]]
    print("build %d: %s; rest per round: %s" % (i, b, " ".join("%.3f" % v for v in rest)))
if len(builds) > 1:
    for i in range(1, len(builds)):
        ratios = [res[i][r]["rest"] / res[0][r]["rest"] for r in range(repeats)]
        print("RESULT rest build %d / build 0: median %.2f over %d rounds (per round: %s)" % (
            i, st.median(ratios), repeats, " ".join("%.2f" % v for v in ratios)))
PY
rm -rf "$out"
