#!/usr/bin/env bash
# Kill-restart (--policy nd) on a real Slurm with several nodes on localhost: a 3-node job whose
# node n2 turns 5x slower at step 10 (emulated by node name, so the slowness stays with the
# node when the ranks are renumbered) decides to restart without n2, checkpoints, exits with
# code 75; scripts/slurm/antdt-train.sbatch resubmits it excluding n2, on n1, n3 and the spare
# n4; the resumed job finishes with every sample exactly once per epoch.
#   test_nd_restart.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
# A command that fails outside a test's own checks ends the script (set -e); say which one.
trap 'echo "FAIL: line $LINENO exited $?: $BASH_COMMAND" >&2' ERR
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
for tool in slurmctld slurmd munged sbatch; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
D=$(mktemp -d /tmp/antdt-slurm-nd.XXXXXX)
chmod 755 "$D"
cleanup() { "$src/scripts/slurm/local-slurm.sh" stop "$D/slurm" || true; rm -rf "$D"; }
trap cleanup EXIT
conf=$(ANTDT_SLURM_NODES=4 ANTDT_SLURMCTLD_PORT=6827 ANTDT_SLURMD_PORT=6840 \
       "$src/scripts/slurm/local-slurm.sh" start "$D/slurm") || { tail -20 "$D"/slurm/log/*.log; exit 1; }
eval "$conf"
fail() { echo "FAIL: $*"; for f in "$D"/run/*.out "$D"/slurm/log/slurmctld.log; do [ -f "$f" ] && { echo "--- $f"; tail -40 "$f"; }; done; exit 1; }
[ "$(sinfo -h -N -o %N | sort -u | paste -sd, -)" = "n1,n2,n3,n4" ] || fail "expected four nodes n1..n4"

samples=6000
"$build/apps/antdt-datagen" -o "$D/train.h5" --samples $samples --dim 8 --classes 4 >/dev/null
mkdir -p "$D/run"
export ANTDT_TRAIN="$build/apps/antdt-train" ANTDT_RUN_DIR="$D/run" ANTDT_LOG_LEVEL=warn ANTDT_RESTART_COOLDOWN=0
args=(--data "$D/train.h5" --layers 8,16,4 --global-batch 60 --epochs 3 --policy nd --virtual-device 0.001
      --emulate-schedule @n2:10:0.2 --checkpoint-every 5 --quiet)

. "$src/tests/slurm/lib.sh"  # wait_job, wait_resubmitted, tcp_startup_failed

for attempt in 1 2; do
  first=$(sbatch --parsable -N 3 --ntasks-per-node=1 -J ndrestart -o "$D/run/job-%j.out" \
            "$src/scripts/slurm/antdt-train.sbatch" "${args[@]}")
  state=$(wait_job "$first")
  [ "$state" != COMPLETED ] && [ $attempt = 1 ] && tcp_startup_failed "$D/run/job-$first.out" && continue
  break
done
[ "$state" = COMPLETED ] || fail "the first job ended as '$state' (it hands over with exit 0 after resubmitting)"
grep -q "antdt: kill-restart (exit 75)" "$D/run/job-$first.out" || fail "the first job did not stop for a kill-restart"
second=$(sed -n 's/^antdt: resubmitted as job \([0-9]*\).*/\1/p' "$D/run/job-$first.out")
[ -n "$second" ] || fail "no resubmission in the first job's output"
[ "$(scontrol show job -o "$second" | grep -o 'StdOut=[^ ]*')" = "StdOut=$D/run/job-$second.out" ] ||
  fail "the resubmitted job does not write its output beside the first's"
state=$(wait_resubmitted "$second" "$D/run/job-$second.out")
[ "$state" = COMPLETED ] || fail "the resubmitted job $second ended as '$state'"
ckpt="$D/run/ndrestart-$first-ckpt"  # <job name>-<job id> of the first job, kept by the resubmission
[ "$(cat "$ckpt/antdt-restart-exclude")" = n2 ] || fail "the exclude file holds '$(cat "$ckpt/antdt-restart-exclude")', not n2"
grep -q "^relaunch " "$ckpt/antdt-restart-history" || fail "the resumed job did not measure the relaunch"
python3 - "$D/run/summary-$first-0.json" "$D/run/summary-$second-0.json" $samples <<'PY' || fail "summary checks failed"
import json, sys
first, second, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
assert sorted(first["nodes"]) == ["n1", "n2", "n3"], first["nodes"]
r = first["restart"]
assert r["nodes"] == ["n2"], r
assert r["gain_seconds"] > r["cost_seconds"] > 0, r
assert r["step"] > 10, r
assert "n2" not in second["nodes"] and len(second["nodes"]) == 3, second["nodes"]
assert second["ranks"] == 3
assert [e["committed"] for e in second["epochs"]] == [n] * 3, second["epochs"]
assert second["duplicated_samples"] == 0 and second["missing_samples"] == 0
assert second["samples"] == 3 * n
assert "restart" not in second, second.get("restart")
print("kill-restart OK: restarted without", r["nodes"], "after step", r["step"], "; gain %.2f s > cost %.2f s" %
      (r["gain_seconds"], r["cost_seconds"]), "; resumed on", second["nodes"])
PY
echo "PASS"
