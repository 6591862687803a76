#!/usr/bin/env bash
# The non-dedicated mode's figures (docs/nd.md), on the virtual device: every rank waits out its
# modelled compute (b * c / speed), so the ranks do not compete for this machine's cores and
# sum x_i is known. Prints what it measures; the raw logs go to OUT.
#   perf/nd/nd-study.sh [build-dir]       OUT=dir   REPEATS=3
#  1. transient 3x slowdowns on 10 % of steps at random ranks, 4+1 ranks: efficiency against
#     sum x_i of static, dd and nd (real MPI ranks; the simulator beside it);
#  2. a rank that turns 3x slower half way: the time to finish 3 epochs for static, dd and nd,
#     nd's kill-restart included (real ranks: the restarted job runs without the slowdown, as
#     on a replacement node; its relaunch is measured; the simulator beside it).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${OUT:-$root/out/nd-$(date +%Y%m%d-%H%M%S)}
repeats=${REPEATS:-3}
case $repeats in '' | *[!0-9]*) echo "REPEATS must be a number" >&2; exit 2 ;; esac
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 ANTDT_LOG_LEVEL=warn
cmake --build "$build" --target antdt-bench-session antdt-train antdt-datagen antdt-sim >/dev/null || exit 1
b=$build
echo "# nd study, $(date -u +%F), $(nproc) cores, virtual device (EMULATED speeds); logs in $out"

echo "## 1. transient 3x slowdowns on 10% of steps, 4+1 ranks, B=200, c=1 ms/sample"
mpirun -np 5 "$b/perf/session/antdt-bench-session" --mode efficiency --speeds 1,1,1,1,1 --transient 0.1,3,1 \
  --policies static,dd,nd --virtual-device 0.001 --global-batch 200 --steps 150 --repeats "$repeats" \
  > "$out/transient-real.txt" 2>&1
grep RESULT "$out/transient-real.txt" | grep -v "^RESULT control"
"$b/apps/antdt-sim" --speeds 1,1,1,1,1 -B 200 --seconds-per-sample 0.001 --emulate-transient 0.1,3,1 --steps 2000 \
  --policy static dd nd --no-charge-decision > "$out/transient-sim.txt" 2>&1
echo "simulated (2000 steps):"; grep -E "^(static|dd|nd) " "$out/transient-sim.txt"

echo "## 2. rank 3 of 4 turns 3x slower at step 200, 3 epochs of 60,000 samples, B=400, c=0.5 ms/sample"
data="$out/half.h5"
"$b/apps/antdt-datagen" -o "$data" --samples 60000 --dim 8 --classes 4 --overwrite >/dev/null
common=(--data "$data" --layers 8,16,4 --global-batch 400 --epochs 3 --virtual-device 0.0005 --quiet --no-probe)
for policy in static dd nd; do
  ck="$out/ck-$policy"
  rm -rf "$ck"
  t0=$(date +%s.%N)
  mpirun -np 4 "$b/apps/antdt-train" "${common[@]}" --policy "$policy" --emulate-schedule 3:200:0.33 \
    --checkpoint-dir "$ck" --checkpoint-every 50 --summary-json "$out/half-$policy-1.json" > "$out/half-$policy-1.txt" 2>&1
  rc=$?
  restarts=0
  if [ "$rc" -eq 75 ]; then  # kill-restart: resume on a "replacement node", without the slowdown
    restarts=1
    mpirun -np 4 "$b/apps/antdt-train" "${common[@]}" --policy "$policy" --resume \
      --checkpoint-dir "$ck" --checkpoint-every 50 --summary-json "$out/half-$policy-2.json" > "$out/half-$policy-2.txt" 2>&1
    rc=$?
  fi
  t1=$(date +%s.%N)
  python3 - "$policy" "$t0" "$t1" "$rc" "$restarts" "$out" <<'PY'
import json, sys, os
policy, t0, t1, rc, restarts, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
last = json.load(open(os.path.join(out, f"half-{policy}-{restarts + 1}.json")))
first = json.load(open(os.path.join(out, f"half-{policy}-1.json")))
cov = [(e["committed"], e["missing"], e["duplicated"]) for e in last["epochs"]]
extra = ""
if "restart" in first:
    r = first["restart"]
    extra = f"; restarted after step {r['step']} (predicted gain {r['gain_seconds']:.1f} s > measured cost {r['cost_seconds']:.2f} s)"
print(f"{policy:7s} exit {rc}, time to finish {t1 - t0:6.1f} s (relaunches included), epochs {cov}{extra}")
PY
done
"$b/apps/antdt-sim" --speeds 1,1,1,1 -B 400 --seconds-per-sample 0.0005 --emulate-schedule 3:200:0.33 --epochs 3 \
  --dataset-size 60000 --steps 1000000 --policy static dd nd --no-charge-decision --restart-seconds 2 \
  > "$out/half-sim.txt" 2>&1
echo "simulated (restart cost 2 s):"; grep -E "^simulated time|at step" "$out/half-sim.txt"
