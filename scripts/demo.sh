#!/usr/bin/env bash
# The main job, end to end on a fresh machine: install dependencies, build the apps, generate
# a learnable data set, then train on 4 ranks where rank 3 is emulated at 1/3 speed, once
# with equal batches (static, plain BSP) and once with antdt's dedicated-mode planner (dd).
#   scripts/demo.sh [out-dir]     (ANTDT_DEMO_SAMPLES, ANTDT_DEMO_RANKS override the size)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/out/demo}
samples=${ANTDT_DEMO_SAMPLES:-16384}
ranks=${ANTDT_DEMO_RANKS:-4}
build=${ANTDT_BUILD_DIR:-$root/build}
# Both go into arithmetic, Python and command lines below: check they are plain numbers before
# anything runs (bash evaluates $(...) inside an arithmetic expression's array index, and
# Python would run any expression it is handed). Then they are only passed as arguments.
whole_number() {  # NAME VALUE LEAST
  if ! [[ $2 =~ ^[1-9][0-9]{0,8}$ ]] || [ "$2" -lt "$3" ]; then
    echo "demo.sh: $1 must be a whole number >= $3, not '$2'" >&2
    exit 2
  fi
}
whole_number ANTDT_DEMO_SAMPLES "$samples" 4
whole_number ANTDT_DEMO_RANKS "$ranks" 1
"$root/scripts/install-deps.sh"
if [ ! -f "$build/build.ninja" ]; then
  args=(-S "$root" -B "$build" -G Ninja)
  [ -x /usr/local/cuda/bin/nvcc ] && args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
  cmake "${args[@]}" >/dev/null
fi
cmake --build "$build" -j "$(nproc)" --target antdt-train antdt-datagen
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$out"
"$build/apps/antdt-datagen" -o "$out/train.h5" --samples "$samples" --dim 32 --classes 10 --overwrite \
  --eval-output "$out/eval.h5" --eval-samples $((samples / 4))
# Emulated speeds 1,1,1,1/3 on a virtual device (0.1 ms per sample at speed 1): ranks wait out
# their modelled compute instead of competing for this machine's two cores (docs/benchmarks.md).
speeds=$(python3 -c "import sys; n = int(sys.argv[1]); print(','.join(['1'] * (n - 1) + ['0.33']))" "$ranks")
common=(--data "$out/train.h5" --eval-data "$out/eval.h5" --layers 32,64,10 --global-batch 256 --epochs 2
        --emulate-speed "$speeds" --virtual-device 0.0001 --progress always --progress-every 20)
for policy in static dd; do
  echo "=== antdt-train --policy $policy on $ranks ranks (speeds $speeds, EMULATED) ==="
  mpirun -np "$ranks" "$build/apps/antdt-train" "${common[@]}" --policy "$policy" \
    --summary-json "$out/$policy.json" --timeline "$out/$policy.trace.json" --metrics "$out/$policy.metrics.csv"
done
python3 - "$out/static.json" "$out/dd.json" <<'PY'
import json, sys
s, d = (json.load(open(p)) for p in sys.argv[1:3])
print("\n=== static vs dd (same data, same emulated speeds) ===")
for name, r in (("static", s), ("dd", d)):
    print(f"{name:>6}: throughput {r['throughput']:8.0f} samples/s  efficiency {r['efficiency']:.3f}  "
          f"eval accuracy {r.get('eval_accuracy', float('nan')):.3f}  split {r['final_split']}  "
          f"duplicated {r['duplicated_samples']} missing {r['missing_samples']}")
print(f"dd / static throughput: {d['throughput'] / s['throughput']:.2f}x")
PY
echo "Timelines (open in https://ui.perfetto.dev): $out/static.trace.json $out/dd.trace.json"
