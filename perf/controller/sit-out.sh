#!/usr/bin/env bash
# Backup workers (issue 39, docs/nd.md "Sitting out"): a rank that is away or that costs more than
# it gives sits out, against static, dd without sitting out and the fast ranks by themselves.
#
#  A. virtual device: 8 ranks (oversubscribed on 2 cores: they wait out modelled compute), rank 7
#     at 0.02 of the others' speed, c = 0.5 ms a sample, B 256: one sample of rank 7 (25 ms) takes
#     longer than the others' shares of a step (18 ms). static, dd --backup-workers 0, dd (default:
#     1). Printed: throughput over the sum x_i of the other 7 (7 / c = 14,000 samples/s).
#  B. real sharing: 2 ranks of antdt-train bound to cores 0 and 1 (the MLP 64,256,256,10 on
#     synthetic data), and a CPU-bound co-tenant (stress-ng --cpu 1) pinned to core 1 at nice 0 and
#     at nice -10; at each B of BATCHES (default 64 and 2048: steps of about 2 ms and 80 ms on the
#     machine of the morning of 2026-12-07, where rank 0 by itself trained 23-34k samples/s; by the
#     evening it trained about 150k, and long steps needed BATCHES=10240, about 65 ms). static,
#     dd --backup-workers 0, dd (default) and rank 0 by itself (1 rank on core 0, the same B).
#     Printed: each over rank 0 by itself, and the default over static. TENANT=stream makes the
#     co-tenant a memory-bandwidth hog instead (stress-ng --stream 1, same core and nice levels:
#     it takes rank 1's core and the memory bandwidth both ranks share). B_EXTRA adds configs to
#     each round: nd, auto, and fixed splits given as rank 0's fraction of B (B_EXTRA="nd auto
#     0.67 0.9"); the best fixed split's median is then printed beside dd's.
#  C. real sharing: the same 2 ranks, rank 1 under a cgroup v1 CPU quota of QUOTA of a core
#     (default 0.25; period 4 ms) instead of a co-tenant, at each B of QUOTA_BATCHES (default
#     512: at B 64 this machine's steps are 0.4 ms, and 2 ranks cost more than 1 even without a
#     quota): static, dd --backup-workers 0, dd (default) and rank 0 by itself.
#  D. real sharing, the quota goes: dd (default), rank 1 under the quota for the first LIFT_AFTER
#     seconds (default 10) of runs of 2 x SECONDS_PER_RUN, then uncapped. Printed: how long after
#     the quota went rank 1 rejoined for good (the first rejoin after which it never sat out
#     again), in seconds of training, from the run's metrics (its steps' wall times) and summary
#     (its plans); the lift's time within the run is LIFT_AFTER less the start-up (the run's
#     length less the summary's wall_seconds).
#  E. real sharing, a co-tenant that comes and goes: stress-ng --cpu 1 at nice -10 pinned to core 1,
#     stopped and continued every PERIOD seconds (default 5), at each B of SHARE_BATCHES (default
#     512): static, dd --backup-workers 0, dd (default), rank 0 by itself.
#  F. real sharing, the co-tenant goes: as D, with the nice -10 co-tenant of E there for the first
#     LIFT_AFTER seconds and then killed.
#
# Each run lasts SECONDS_PER_RUN and ends by SIGUSR1, which mpirun forwards (a stop at a step boundary); its
# summary's throughput
# is samples over the run's wall time, start-up excluded. Runs are interleaved over REPEATS rounds;
# the medians are printed, with every run's figure in OUT/runs.tsv.
#   perf/controller/sit-out.sh [build-dir]    REPEATS=5 SECONDS_PER_RUN=20 OUT=dir PARTS="A B" BATCHES="64 2048"
#                                            NICES="0 -10" B_EXTRA="nd auto 0.67" TENANT=cpu|stream
#                                            PARTS="C D" QUOTA=0.25 QUOTA_BATCHES=512 LIFT_AFTER=10
#                                            PARTS="E F" PERIOD=5 SHARE_BATCHES=512
# Needs 2 cores and stress-ng (scripts/install-deps.sh installs it); C and D need root and the
# cgroup v1 cpu controller at /sys/fs/cgroup/cpu. Real sharing on a shared
# machine: quote the medians, and the load beside them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
repeats=${REPEATS:-5}
secs=${SECONDS_PER_RUN:-20}
parts=${PARTS:-A B}
batches=${BATCHES:-64 2048}
out=${OUT:-$(mktemp -d /tmp/antdt-sit-out.XXXXXX)}
mkdir -p "$out"
train=$build/apps/antdt-train
[ -x "$train" ] || { echo "sit-out: $train is missing (build first)" >&2; exit 2; }
command -v stress-ng >/dev/null || { echo "sit-out: stress-ng is missing (scripts/install-deps.sh)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 ANTDT_LOG_LEVEL=warn
tenant=
cg=/sys/fs/cgroup/cpu/antdt-sit-out-$$
period=4000  # us: a quarter of a core is then 1000 us, the smallest quota the kernel takes
cleanup() {
  if [ -n "$tenant" ]; then kill "$tenant" 2>/dev/null || true; wait "$tenant" 2>/dev/null || true; fi
  pkill -f "stress-ng --cpu 1 --taskset 1" 2>/dev/null || true
  pkill -f "stress-ng --stream 1 --taskset 1" 2>/dev/null || true
  if [ -d "$cg" ]; then
    echo -1 >"$cg/cpu.cfs_quota_us" 2>/dev/null || true
    rmdir "$cg" 2>/dev/null || true
  fi
}
trap cleanup EXIT
printf 'part\tcase\tconfig\trepeat\tthroughput\n' >"$out/runs.tsv"

# One run of SECONDS: run NAME NP [mpirun options...] -- [antdt-train options...]; prints throughput.
run() {
  local name=$1 np=$2
  shift 2
  local mpi=()
  while [ "$1" != -- ]; do mpi+=("$1"); shift; done
  shift
  local js=$out/$name.json
  rm -f "$js"
  timeout --foreground -s USR1 -k 60 "$secs" mpirun -np "$np" "${mpi[@]}" "$train" --quiet --summary-json "$js" \
    --steps 100000000 "$@" >"$out/$name.log" 2>&1 || true
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['throughput'])" "$js" 2>/dev/null || echo nan
}

record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$out/runs.tsv"; }

if [[ " $parts " == *" A "* ]]; then
  vd=(--synthetic-samples 65536 --synthetic-dim 8 --layers 8,16,4 --global-batch 256 --virtual-device 0.0005
      --emulate-speed 1,1,1,1,1,1,1,0.02)
  for r in $(seq 1 "$repeats"); do
    record A 8-ranks static "$r" "$(run a-static-$r 8 -- "${vd[@]}" --policy static)"
    record A 8-ranks dd-no-sit-out "$r" "$(run a-dd0-$r 8 -- "${vd[@]}" --policy dd --backup-workers 0)"
    record A 8-ranks dd "$r" "$(run a-dd-$r 8 -- "${vd[@]}" --policy dd)"
  done
fi

if [[ " $parts " == *" B "* ]]; then
  bind=(--bind-to core --map-by core)
  b_extra=${B_EXTRA:-}
  for b in $batches; do
    real=(--synthetic-samples 65536 --synthetic-dim 64 --hidden 256,256 --global-batch "$b")
    for nice in ${NICES:-0 -10}; do
      for r in $(seq 1 "$repeats"); do
        case ${TENANT:-cpu} in
          cpu) nice -n "$nice" stress-ng --cpu 1 --taskset 1 --cpu-method int64 -t 0 >/dev/null 2>&1 & ;;
          stream) nice -n "$nice" stress-ng --stream 1 --taskset 1 -t 0 >/dev/null 2>&1 & ;;
          *) echo "sit-out: TENANT must be cpu or stream, not '$TENANT'" >&2; exit 2 ;;
        esac
        tenant=$!
        sleep 1
        c="B$b-nice$nice${TENANT:+-$TENANT}"
        record B "$c" alone "$r" "$(run $c-alone-$r 1 "${bind[@]}" -- "${real[@]}" --policy static)"
        record B "$c" static "$r" "$(run $c-static-$r 2 "${bind[@]}" -- "${real[@]}" --policy static)"
        record B "$c" dd-no-sit-out "$r" \
          "$(run $c-dd0-$r 2 "${bind[@]}" -- "${real[@]}" --policy dd --backup-workers 0)"
        record B "$c" dd "$r" "$(run $c-dd-$r 2 "${bind[@]}" -- "${real[@]}" --policy dd)"
        for extra in $b_extra; do
          case $extra in
            nd | auto) record B "$c" "$extra" "$r" "$(run $c-$extra-$r 2 "${bind[@]}" -- "${real[@]}" --policy "$extra")" ;;
            *) # a fixed split: rank 0's fraction of B
              local0=$(python3 -c "print(max(1, min($b - 1, round($extra * $b))))")
              record B "$c" "fixed-$extra" "$r" "$(run $c-fixed$extra-$r 2 "${bind[@]}" -- "${real[@]}" --policy static \
                --fixed-split "$local0,$((b - local0))")" ;;
          esac
        done
        cleanup
        tenant=
      done
    done
  done
fi

if [[ " $parts " == *" C "* || " $parts " == *" D "* ]]; then
  [ -w /sys/fs/cgroup/cpu ] || { echo "sit-out: parts C and D need root and the cgroup v1 cpu controller" >&2; exit 2; }
  quota=${QUOTA:-0.25}
  mkdir -p "$cg"
  echo "$period" >"$cg/cpu.cfs_period_us"
  cap() { echo "$1" >"$cg/cpu.cfs_quota_us"; }  # microseconds per period; -1: none
  capped=$(python3 -c "print(int($quota * $period))")
  # Rank 1 joins the cgroup before it starts (mpirun's MPMD form: one launch, two programs).
  pair() {  # NAME SECONDS [antdt-train options...]: 2 ranks, rank 1 in the cgroup; prints throughput
    local name=$1 length=$2 js=$out/$1.json
    shift 2
    rm -f "$js"
    timeout --foreground -s USR1 -k 60 "$length" mpirun --bind-to core --map-by core \
      -np 1 "$train" --quiet --summary-json "$js" --steps 100000000 "$@" : \
      -np 1 bash -c "echo \$\$ > $cg/cgroup.procs; exec \"\$0\" \"\$@\"" "$train" --quiet --summary-json "$js" \
      --steps 100000000 "$@" >"$out/$name.log" 2>&1 || true
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['throughput'])" "$js" 2>/dev/null || echo nan
  }
fi

if [[ " $parts " == *" C "* ]]; then
  for b in ${QUOTA_BATCHES:-512}; do
    real=(--synthetic-samples 65536 --synthetic-dim 64 --hidden 256,256 --global-batch "$b")
    c="B$b-quota$quota"
    cap "$capped"
    for r in $(seq 1 "$repeats"); do
      record C "$c" alone "$r" "$(run $c-alone-$r 1 --bind-to core --map-by core -- "${real[@]}" --policy static)"
      record C "$c" static "$r" "$(pair $c-static-$r "$secs" "${real[@]}" --policy static)"
      record C "$c" dd-no-sit-out "$r" "$(pair $c-dd0-$r "$secs" "${real[@]}" --policy dd --backup-workers 0)"
      record C "$c" dd "$r" "$(pair $c-dd-$r "$secs" "${real[@]}" --policy dd)"
    done
  done
fi

# rejoin_of NAME LIFT WHOLE REPEAT WHAT: appends to rejoin.tsv how long after LIFT seconds (from
# the launch of a run of WHOLE seconds) rank 1 rejoined for good: the first rejoin after which it
# never sat out again, in seconds of training, from the run's metrics and summary.
rejoin_of() {
  python3 - "$out/$1.json" "$out/$1.csv" "$2" "$3" "$4" "$5" >>"$out/rejoin.tsv" <<'PY'
import csv, json, sys
summary, metrics, lift, whole, repeat, what = sys.argv[1:7]
lift, whole = float(lift), float(whole)
s = json.load(open(summary))
walls = {}
for row in csv.DictReader(open(metrics)):
    walls[int(row["step"])] = float(row["step_wall_s"])
start, t = {}, 0.0
for step in sorted(walls):
    start[step] = t
    t += walls[step]
lift_at = lift - (whole - s["wall_seconds"])  # the lift, in seconds of training
sat = [p for p in s["plans"] if 1 in p["sitting"]]
if not sat:
    print(f"{what}\t{repeat}\tnever sat out\t\t{s['sit_outs']}\t{s['rejoins']}")
    sys.exit()
last_out = max(p["effective_step"] for p in sat)
back = [p for p in s["plans"] if p["effective_step"] > last_out and 1 not in p["sitting"]]
if not back:
    print(f"{what}\t{repeat}\tstill sitting out at the end\t\t{s['sit_outs']}\t{s['rejoins']}")
    sys.exit()
step = back[0]["effective_step"]
print(f"{what}\t{repeat}\t{start.get(step, t) - lift_at:.2f}\t{step}\t{s['sit_outs']}\t{s['rejoins']}")
PY
}

if [[ " $parts " == *" D "* ]]; then
  lift=${LIFT_AFTER:-10}
  whole=$((2 * secs))
  real=(--synthetic-samples 65536 --synthetic-dim 64 --hidden 256,256 --global-batch "${QUOTA_BATCHES:-512}")
  real[${#real[@]}-1]=${real[${#real[@]}-1]%% *}  # the first of QUOTA_BATCHES
  for r in $(seq 1 "$repeats"); do
    cap "$capped"
    (sleep "$lift"; cap -1) &
    lifter=$!
    pair d-dd-$r "$whole" "${real[@]}" --policy dd --metrics "$out/d-dd-$r.csv" >/dev/null
    wait "$lifter" 2>/dev/null || true
    rejoin_of d-dd-$r "$lift" "$whole" "$r" quota
  done
fi

# E and F: a busy co-tenant at nice -10 pinned to core 1 (rank 1's), the same 2 ranks bound to
# cores 0 and 1, at each B of SHARE_BATCHES (default 512).
tenant_on() { nice -n -10 stress-ng --cpu 1 --taskset 1 --cpu-method int64 -t 0 >/dev/null 2>&1 & tenant=$!; }
if [[ " $parts " == *" E "* ]]; then
  # E: the co-tenant comes and goes: on for PERIOD seconds (default 5), then stopped (SIGSTOP to
  # its processes) for PERIOD, over the whole run. Printed: each over rank 0 by itself.
  period_s=${PERIOD:-5}
  bind=(--bind-to core --map-by core)
  toggler=
  for b in ${SHARE_BATCHES:-512}; do
    real=(--synthetic-samples 65536 --synthetic-dim 64 --hidden 256,256 --global-batch "$b")
    c="B$b-every${period_s}s"
    for r in $(seq 1 "$repeats"); do
      tenant_on
      (while sleep "$period_s"; do
         pkill -STOP -f "stress-ng --cpu 1 --taskset 1"; sleep "$period_s"; pkill -CONT -f "stress-ng --cpu 1 --taskset 1"
       done) &
      toggler=$!
      sleep 1
      record E "$c" alone "$r" "$(run $c-alone-$r 1 "${bind[@]}" -- "${real[@]}" --policy static)"
      record E "$c" static "$r" "$(run $c-static-$r 2 "${bind[@]}" -- "${real[@]}" --policy static)"
      record E "$c" dd-no-sit-out "$r" \
        "$(run $c-dd0-$r 2 "${bind[@]}" -- "${real[@]}" --policy dd --backup-workers 0)"
      record E "$c" dd "$r" "$(run $c-dd-$r 2 "${bind[@]}" -- "${real[@]}" --policy dd)"
      kill "$toggler" 2>/dev/null || true
      wait "$toggler" 2>/dev/null || true
      pkill -CONT -f "stress-ng --cpu 1 --taskset 1" 2>/dev/null || true
      cleanup
      tenant=
    done
  done
fi
if [[ " $parts " == *" F "* ]]; then
  # F: the co-tenant goes: there for the first LIFT_AFTER seconds of runs of 2 x SECONDS_PER_RUN,
  # then killed; how long after it went rank 1 rejoined for good, as in D.
  lift=${LIFT_AFTER:-10}
  whole=$((2 * secs))
  b=${SHARE_BATCHES:-512}
  real=(--synthetic-samples 65536 --synthetic-dim 64 --hidden 256,256 --global-batch "${b%% *}")
  for r in $(seq 1 "$repeats"); do
    tenant_on
    sleep 1
    (sleep "$lift"; pkill -f "stress-ng --cpu 1 --taskset 1") &
    lifter=$!
    secs=$whole run f-dd-$r 2 --bind-to core --map-by core -- "${real[@]}" --policy dd --metrics "$out/f-dd-$r.csv" \
      >/dev/null
    wait "$lifter" 2>/dev/null || true
    cleanup
    tenant=
    rejoin_of f-dd-$r "$lift" "$whole" "$r" co-tenant
  done
fi

python3 - "$out/runs.tsv" <<'EOF'
import collections, csv, statistics, sys
runs = collections.defaultdict(list)
with open(sys.argv[1]) as f:
    for row in csv.DictReader(f, delimiter="\t"):
        runs[(row["part"], row["case"], row["config"])].append(float(row["throughput"]))
med = {k: statistics.median(v) for k, v in runs.items()}
def show(part, case, config, ref, what):
    k = (part, case, config)
    if k not in med or ref <= 0:
        return
    lo, hi = min(runs[k]), max(runs[k])
    print(f"{part} {case:14s} {config:14s} {med[k]:10.0f} samples/s ({lo:.0f}-{hi:.0f}, {len(runs[k])} runs)"
          f"  = {med[k] / ref:.3f} of {what}")
for case in sorted({c for p, c, _ in med if p == "A"}):
    for config in ("static", "dd-no-sit-out", "dd"):
        show("A", case, config, 7 / 0.0005, "the sum x_i of the other 7")
# B's cases are named B<batch>-nice<n>: the co-tenant's nice level on rank 1's core.
for case in sorted({c for p, c, _ in med if p == "B"}):
    alone = med.get(("B", case, "alone"), 0.0)
    fixed = sorted(c for p, k, c in med if p == "B" and k == case and c.startswith("fixed-"))
    for config in ("alone", "static", "dd-no-sit-out", "dd", "nd", "auto", *fixed):
        show("B", case, config, alone, "rank 0 by itself")
    if ("B", case, "static") in med:
        print(f"B {case:14s} dd (sitting out) over static: {med[('B', case, 'dd')] / med[('B', case, 'static')]:.2f}x")
    if fixed:
        best = max(fixed, key=lambda c: med[("B", case, c)])
        for config in ("dd", "nd", "auto"):
            if ("B", case, config) in med:
                print(f"B {case:14s} {config} over the best fixed split ({best}): "
                      f"{med[('B', case, config)] / med[('B', case, best)]:.3f}")
# C's cases are named B<batch>-quota<q>: rank 1's CPU quota; E's B<batch>-every<p>s.
for part in ("C", "E"):
    for case in sorted({c for p, c, _ in med if p == part}):
        alone = med.get((part, case, "alone"), 0.0)
        for config in ("alone", "static", "dd-no-sit-out", "dd"):
            show(part, case, config, alone, "rank 0 by itself")
        if (part, case, "static") in med:
            print(f"{part} {case:14s} dd (sitting out) over static: "
                  f"{med[(part, case, 'dd')] / med[(part, case, 'static')]:.2f}x")
EOF
if [ -s "$out/rejoin.tsv" ]; then
  python3 - "$out/rejoin.tsv" <<'EOF'
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
delays = collections.defaultdict(list)
for what, repeat, delay, step, outs, rejoins in rows:
    try:
        delays[what].append(float(delay))
    except ValueError:
        delays[what]
    print(f"rejoin, {what} went, repeat {repeat}: rejoined for good {delay} s after (step {step}; sit-outs {outs}, "
          f"rejoins {rejoins})")
for what, d in delays.items():
    runs = sum(1 for r in rows if r[0] == what)
    if d:
        print(f"rejoin after the {what} went: median {statistics.median(d):.2f} s ({min(d):.2f}-{max(d):.2f}, "
              f"{len(d)} of {runs} runs)")
    else:
        print(f"rejoin after the {what} went: none to time in {runs} runs (the rows above say why)")
EOF
fi
