#!/usr/bin/env bash
# Real slowness without emulation (issues 27 and 30): 2 ranks, one per core, rank 1's CPU share
# capped by the kernel (a cgroup v1 CPU quota), as on a node shared with other jobs: the slow rank
# is slowed in its compute, its communication and its data alike. No --emulate-* option. Real
# compute: antdt-bench-session in stretch mode with every speed 1 (emulation off), the MLP
# 64,256,256,10 on synthetic samples.
#
# Per repeat (interleaved, medians at the end):
#   - each core's standalone speed under each cap, both cores busy at once (rank 0's core free,
#     rank 1's capped), one rank each at the equal share B/2: sum x_i is the ideal, and
#     2 min x_i the static split's limit;
#   - steady caps 0.5 and 0.25 at B = 512 and 2048: static, dd, nd, auto and the best fixed split
#     (found by a sweep of static --fixed-split runs before the measurement);
#   - the cap changing every PHASE seconds among 1, 0.5 and 0.25 (B 512): static, dd, nd, auto,
#     each run lasting a whole number of cycles, so that every run sees each cap for as long;
#     beside them the ceiling of any split: the steady runs' best fixed split of each phase (static
#     without a cap, a run of its own), each for a third of the time, over static's.
# Bars (issue 30): changing cap, auto >= 1.3x static (printed beside the limit the phases'
# standalone speeds allow); steady cap, auto never more than 3 % below the better of dd and nd.
#   perf/controller/cpu-cap.sh [build-dir]    REPEATS=3 SECONDS_PER_RUN=12 PHASE=3 CYCLES=2 OUT=dir
# Needs root, the cgroup v1 cpu controller at /sys/fs/cgroup/cpu and 2 cores. Real compute on a
# shared machine: quote the medians, and the load beside them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
repeats=${REPEATS:-3}
run_seconds=${SECONDS_PER_RUN:-12}
phase=${PHASE:-3}
cycles=${CYCLES:-2}
out=${OUT:-$(mktemp -d /tmp/antdt-cpu-cap.XXXXXX)}
mkdir -p "$out"
bench=$build/perf/session/antdt-bench-session
[ -x "$bench" ] || { echo "cpu-cap: $bench is missing (configure with -DANTDT_BUILD_PERF=ON)" >&2; exit 2; }
[ -w /sys/fs/cgroup/cpu ] || { echo "cpu-cap: needs root and the cgroup v1 cpu controller at /sys/fs/cgroup/cpu" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 ANTDT_LOG_LEVEL=warn
mpirun -np 2 --bind-to core --map-by core true >/dev/null 2>&1 || { echo "cpu-cap: mpirun cannot bind 2 ranks to 2 cores here" >&2; exit 2; }

cg=/sys/fs/cgroup/cpu/antdt-cpu-cap-$$
period=4000  # us: a quarter of a core is then 1000 us, the smallest quota the kernel takes
mkdir -p "$cg"
echo "$period" >"$cg/cpu.cfs_period_us"
cycler=
cleanup() {
  [ -n "$cycler" ] && kill "$cycler" 2>/dev/null && wait "$cycler" 2>/dev/null
  echo -1 >"$cg/cpu.cfs_quota_us" 2>/dev/null || true
  rmdir "$cg" 2>/dev/null || true
}
trap cleanup EXIT
set_cap() {  # a share of one core; 1: no cap
  if [ "$1" = 1 ]; then echo -1 >"$cg/cpu.cfs_quota_us"; else echo "$(python3 -c "print(int($1 * $period))")" >"$cg/cpu.cfs_quota_us"; fi
}
common=(--mode efficiency --virtual-device 0 --layers 64,256,256,10 --warmup 20 --repeats 1)
# Two ranks, one per core; rank 1 in the capped cgroup.
pair() {  # log B policy seconds [extra...]
  local log=$1 b=$2 policy=$3 secs=$4
  shift 4
  local args=("${common[@]}" --speeds 1,1 --global-batch "$b" --policies "$policy" --seconds "$secs" "$@")
  mpirun --bind-to core --map-by core -np 1 "$bench" "${args[@]}" : \
    -np 1 bash -c "echo \$\$ > $cg/cgroup.procs; exec \"\$0\" \"\$@\"" "$bench" "${args[@]}" >"$log" 2>&1
}
# Each core alone at the equal share, both at once: core 0 free, core 1 in the cgroup.
standalone() {  # prefix B
  local args=("${common[@]}" --speeds 1 --global-batch $(($2 / 2)) --policies static --seconds 4)
  taskset -c 0 "$bench" "${args[@]}" >"$1-core0.log" 2>&1 &
  local first=$!
  taskset -c 1 bash -c "echo \$\$ > $cg/cgroup.procs; exec \"\$0\" \"\$@\"" "$bench" "${args[@]}" >"$1-core1.log" 2>&1
  wait "$first"
}
thr() { sed -n 's/^RUN .* throughput=\([0-9.]*\) .*/\1/p' "$1" | head -1; }

echo "cpu-cap: out $out; load $(cut -d' ' -f1-3 /proc/loadavg)"
# Offline: the best fixed split of each (cap, B), the highest throughput of short static runs
# around the split the standalone speeds call for.
declare -A best
for cap in 0.5 0.25; do
  set_cap "$cap"
  for b in 512 2048; do
    standalone "$out/sweep-$cap-$b" "$b"
    x0=$(thr "$out/sweep-$cap-$b-core0.log")
    x1=$(thr "$out/sweep-$cap-$b-core1.log")
    top=0 top_b=$((b / 2))
    for f in 0.6 0.8 1.0 1.2 1.4; do
      b1=$(python3 -c "print(max(1, min($b - 1, round($b * $f * $x1 / ($x0 + $x1)))))")
      pair "$out/sweep-$cap-$b-$b1.log" "$b" fixed 4 --fixed-split "$((b - b1)),$b1"
      t=$(thr "$out/sweep-$cap-$b-$b1.log")
      if python3 -c "import sys; sys.exit(0 if $t > $top else 1)"; then top=$t top_b=$b1; fi
    done
    best[$cap-$b]="$((b - top_b)),$top_b"
    echo "sweep cap $cap B $b: standalone x0 $x0 x1 $x1, best fixed split ${best[$cap-$b]} ($top samples/s)"
  done
done

for r in $(seq 1 "$repeats"); do
  for cap in 1 0.5 0.25; do
    set_cap "$cap"
    for b in 512 2048; do standalone "$out/alone-$cap-$b-$r" "$b"; done
  done
  # Equal speeds (no cap), B 512: static is the best fixed split there. With the best fixed
  # splits at 0.5 and 0.25 it gives the changing cap's ceiling for any split (below).
  set_cap 1
  pair "$out/1-512-static-$r.log" 512 static "$run_seconds"
  for cap in 0.5 0.25; do
    set_cap "$cap"
    for b in 512 2048; do
      for p in static dd nd auto fixed; do
        extra=()
        [ "$p" = fixed ] && extra=(--fixed-split "${best[$cap-$b]}")
        pair "$out/$cap-$b-$p-$r.log" "$b" "$p" "$run_seconds" "${extra[@]}"
      done
    done
  done
  # The cap changes every PHASE seconds among 1, 0.5 and 0.25; each run lasts CYCLES whole cycles.
  (while true; do for c in 1 0.5 0.25; do set_cap "$c"; sleep "$phase"; done; done) &
  cycler=$!
  for p in static dd nd auto; do pair "$out/cycle-512-$p-$r.log" 512 "$p" $((3 * phase * cycles)); done
  kill "$cycler"
  wait "$cycler" 2>/dev/null || true
  cycler=
  echo "repeat $r of $repeats done (load $(cut -d' ' -f1-3 /proc/loadavg))"
done

python3 - "$out" "$repeats" <<'EOF'
import re, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
med = statistics.median
def run(path):
    for line in open(path):
        m = re.match(r"RUN policy=(\S+) .*throughput=(\S+) .*plan_changes=(\d+) pooled_steps=(\d+) of (\d+) "
                     r"duplicated=(\d+) missing=(\d+) split=(\S*) x=(\S*)", line)
        if m:
            return dict(thr=float(m.group(2)), plans=int(m.group(3)), pooled=int(m.group(4)) / max(1, int(m.group(5))),
                        clean=m.group(6) == "0" and m.group(7) == "0", split=m.group(8), x=m.group(9))
    raise SystemExit(f"cpu-cap: no result in {path}")
R = range(1, repeats + 1)
def alone(cap, b, r):
    return run(f"{out}/alone-{cap}-{b}-{r}-core0.log")["thr"], run(f"{out}/alone-{cap}-{b}-{r}-core1.log")["thr"]
clean = True
print("real compute, 2 ranks bound to 2 cores, rank 1 under a cgroup CPU quota; MLP 64,256,256,10; medians of "
      f"{repeats} interleaved repeats")
for cap in ("0.5", "0.25"):
    for b in (512, 2048):
        runs = {p: [run(f"{out}/{cap}-{b}-{p}-{r}.log") for r in R] for p in ("static", "dd", "nd", "auto", "fixed")}
        clean = clean and all(x["clean"] for v in runs.values() for x in v)
        sums = [sum(alone(cap, b, r)) for r in R]
        statics = [2 * min(alone(cap, b, r)) for r in R]
        ratio = lambda p, q: med(a["thr"] / c["thr"] for a, c in zip(runs[p], runs[q]))
        better = med(a["thr"] / max(d["thr"], n["thr"]) for a, d, n in zip(runs["auto"], runs["dd"], runs["nd"]))
        x0, x1 = med(alone(cap, b, r)[0] for r in R), med(alone(cap, b, r)[1] for r in R)
        print(f"cap {cap} B {b}: standalone x0 {x0:.0f} x1 {x1:.0f} samples/s (x1/x0 {x1 / x0:.2f}); "
              f"sum x_i {med(sums):.0f}, static limit 2 min x_i {med(statics):.0f}")
        for p, v in runs.items():
            eff = med(a["thr"] / s for a, s in zip(v, sums))
            print(f"  {p:7} {med(a['thr'] for a in v):9.0f} samples/s  {eff:.3f} of sum x_i  split {v[-1]['split']:>9}  "
                  f"x {v[-1]['x']:>13}  plans {med(a['plans'] for a in v):.0f}  pooled {100 * med(a['pooled'] for a in v):.0f}%")
        print(f"RESULT cpu-cap cap={cap} B={b} auto_over_static={ratio('auto', 'static'):.3f} "
              f"auto_over_dd={ratio('auto', 'dd'):.3f} auto_over_nd={ratio('auto', 'nd'):.3f} "
              f"auto_over_fixed={ratio('auto', 'fixed'):.3f} dd_over_fixed={ratio('dd', 'fixed'):.3f} "
              f"auto_over_better_of_dd_nd={better:.3f} bar>=0.97 {'met' if better >= 0.97 else 'MISSED'} "
              f"limit_over_static={med(s / t for s, t in zip(sums, statics)):.3f}")
runs = {p: [run(f"{out}/cycle-512-{p}-{r}.log") for r in R] for p in ("static", "dd", "nd", "auto")}
clean = clean and all(x["clean"] for v in runs.values() for x in v)
# The phases' limit: each cap for a third of the time, sum x_i against the static split's 2 min x_i.
ideal = med(sum(sum(alone(c, 512, r)) for c in ("1", "0.5", "0.25")) / 3 for r in R)
static_limit = med(sum(2 * min(alone(c, 512, r)) for c in ("1", "0.5", "0.25")) / 3 for r in R)
ratio = lambda p: med(a["thr"] / s["thr"] for a, s in zip(runs[p], runs["static"]))
print(f"changing cap (1, 0.5, 0.25, each a third of the time), B 512: mean sum x_i {ideal:.0f}, "
      f"static limit {static_limit:.0f} samples/s")
for p, v in runs.items():
    print(f"  {p:7} {med(a['thr'] for a in v):9.0f} samples/s  {med(a['thr'] for a in v) / ideal:.3f} of sum x_i  "
          f"plans {med(a['plans'] for a in v):.0f}  pooled {100 * med(a['pooled'] for a in v):.0f}%")
# The ceiling of any split: each phase at its best fixed split (static without a cap), each for a
# third of the time, against static in the same phases, from the steady runs of each repeat. No
# policy that only moves samples between the ranks does better, since it cannot beat the best
# fixed split within a phase and pays to follow each change besides.
steady = lambda cap, p, r: run(f"{out}/1-512-static-{r}.log" if cap == "1" else f"{out}/{cap}-512-{p}-{r}.log")["thr"]
oracle = med(sum(steady(c, "fixed", r) for c in ("1", "0.5", "0.25")) / sum(steady(c, "static", r) for c in ("1", "0.5", "0.25"))
             for r in R)
print(f"  the phases' best fixed splits, each a third of the time (steady runs): {oracle:.3f}x static in the same phases")
a = ratio("auto")
print(f"RESULT cpu-cap changing auto_over_static={a:.3f} dd_over_static={ratio('dd'):.3f} "
      f"nd_over_static={ratio('nd'):.3f} best_fixed_phases_over_static={oracle:.3f} "
      f"auto_over_that={a / oracle:.3f} dd_over_that={ratio('dd') / oracle:.3f} "
      f"limit_over_static={ideal / static_limit:.3f} bar auto>=1.3 {'met' if a >= 1.3 else 'MISSED'}")
print(f"RESULT cpu-cap duplicated_and_missing={'0' if clean else 'NOT 0'} in every run")
EOF
echo "runs in $out"
