#!/usr/bin/env bash
# Does a file stored in class order train as well as a shuffled one with default options?
# (docs/dds.md, "The default order"). Two antdt-datagen digit files hold the same samples, one
# sorted by class; each is trained on 2 ranks (static) for EPOCHS epochs with data seeds
# 1..SEEDS, alternating between the files, and every run's held-out accuracy goes to
# OUT/runs.tsv. Prints the means, their difference and its standard error. With SHARD set, the
# runs pass --shard-size SHARD (the shard-local order; 640 = 10 global batches, the old default).
#   perf/dds/sorted-accuracy.sh [build-dir]    SEEDS=20 EPOCHS=8 SHARD= OUT=dir
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
seeds=${SEEDS:-20}
epochs=${EPOCHS:-8}
out=${OUT:-$(mktemp -d /tmp/antdt-sorted-accuracy.XXXXXX)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
gen=$build/apps/antdt-datagen
train=$build/apps/antdt-train
[ -x "$gen" ] && [ -x "$train" ] || { echo "sorted-accuracy: build first ($build)" >&2; exit 2; }
work=$(mktemp -d /tmp/antdt-sorted-accuracy-data.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$gen" --kind digits --image-size 12 --samples 6000 --seed 5 -o "$work/shuffled.h5" \
  --eval-output "$work/eval.h5" --eval-samples 2000 >/dev/null
"$gen" --kind digits --image-size 12 --samples 6000 --seed 5 --sort-by-class -o "$work/sorted.h5" >/dev/null
extra=()
[ -n "${SHARD:-}" ] && extra=(--shard-size "$SHARD")
{
  echo "# sorted-accuracy: $(date -u +%FT%TZ), $(git -C "$root" describe --always --dirty), 6000 digits 12x12, B 64, hidden 64, $epochs epochs, 2 ranks static${SHARD:+, --shard-size $SHARD}"
  printf 'seed\tfile\teval_accuracy\n'
} >"$out/runs.tsv"
for seed in $(seq 1 "$seeds"); do
  for file in shuffled sorted; do
    mpirun -np 2 "$train" --data "$work/$file.h5" --eval-data "$work/eval.h5" --hidden 64 --global-batch 64 \
      --epochs "$epochs" --policy static --data-seed "$seed" --model-seed 1 --quiet \
      --summary-json "$work/s.json" "${extra[@]}" >/dev/null
    printf '%s\t%s\t%s\n' "$seed" "$file" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["eval_accuracy"])' "$work/s.json")" >>"$out/runs.tsv"
  done
done
python3 - "$out/runs.tsv" <<'PY' | tee "$out/summary.txt"
import math, statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if not l.startswith("#")][1:]
acc = {f: [float(a) for _, g, a in rows if g == f] for f in ("shuffled", "sorted")}
for f, v in acc.items():
    print(f"{f:9s} n={len(v)} mean {statistics.mean(v):.4f} sd {statistics.stdev(v):.4f} min {min(v):.4f} max {max(v):.4f}")
d = statistics.mean(acc["sorted"]) - statistics.mean(acc["shuffled"])
se = math.sqrt(sum(statistics.variance(v) / len(v) for v in acc.values()))
print(f"sorted - shuffled: {d:+.4f} ({100 * d:+.2f} percentage points), standard error {100 * se:.2f} points")
PY
echo "runs: $out/runs.tsv" >&2
