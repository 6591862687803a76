#!/usr/bin/env bash
# Rank 0 off the critical path (docs/protocol.md, "the reply lag"), on simulated ranks: the real
# StepCoordinator, DDS, Controller and one Agent per rank, the compute modelled (antdt-sim).
# For each world size, dd with --reply-lag 0 (every step waits for rank 0's decision) and 1 (rank
# 0 decides step t while the ranks compute t+1), interleaved REPEATS times; prints the settled
# efficiency against sum x_i, rank 0's decision time, the steps that waited for a decision and
# peak memory. A last case makes the step shorter than the decision (c = 1 us per sample), so
# that steps must wait and the waits are counted.
#   perf/session/reply-lag.sh [build dir]     RANKS="10000 100000" STEPS=60 REPEATS=3
set -euo pipefail
build=${1:-build}
sim="$build/apps/antdt-sim"
[[ -x "$sim" ]] || { echo "reply-lag.sh: no $sim (build antdt-sim first)" >&2; exit 2; }
ranks=${RANKS:-"10000 100000"}
steps=${STEPS:-60}
repeats=${REPEATS:-3}
profile=1:0.5,0.5:0.25,0.33:0.25

run() {  # world lag c -> "settled_eff decide_ms waits wait_ms peak_mib"
  local out
  out=$("$sim" --ranks "$1" --profile "$profile" --batch-per-rank 128 --steps "$steps" --policy dd \
    --reply-lag "$2" --seconds-per-sample "$3")
  local row waits peak
  row=$(awk '$1 == "dd" && NF > 12 {print $5, $9}' <<<"$out")
  waits=$(sed -n 's/^dd: .* settled.*; \([0-9]*\) step(s) waited.*(\([0-9.e+-]*\) ms in all)/\1 \2/p' <<<"$out")
  peak=$(sed -n 's/^peak memory \([0-9]*\) MiB/\1/p' <<<"$out")
  echo "$row $waits $peak"
}

printf '%-8s %-8s %-6s %-6s %12s %10s %7s %10s %9s\n' ranks c lag round settled_eff decide_ms waits wait_ms peak_MiB
for world in $ranks; do
  for ((k = 1; k <= repeats; ++k)); do
    for lag in 0 1; do
      read -r eff decide waits wait_ms peak <<<"$(run "$world" "$lag" 0.001)"
      printf '%-8s %-8s %-6s %-6s %12s %10s %7s %10s %9s\n' "$world" 0.001 "$lag" "$k" "$eff" "$decide" "$waits" \
        "$wait_ms" "$peak"
    done
  done
done
world=${ranks##* }
read -r eff decide waits wait_ms peak <<<"$(run "$world" 1 0.000001)"
printf '%-8s %-8s %-6s %-6s %12s %10s %7s %10s %9s\n' "$world" 1e-6 1 1 "$eff" "$decide" "$waits" "$wait_ms" "$peak"
