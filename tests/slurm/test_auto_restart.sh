#!/usr/bin/env bash
# Kill-restart under --policy auto on a real Slurm with several nodes on localhost (issue 30 (e)):
# node n2 of a 3-node job turns 5x slower for good at step 10 (emulated by node name, so the
# slowness stays with the node when the ranks are renumbered).
#   1. Three epochs left: restarting without n2 pays. auto decides it (the predicted gain beats
#      the measured restart cost and the model's error), checkpoints, exits 75;
#      scripts/slurm/antdt-train.sbatch resubmits it without n2, on n1, n3 and the spare n4, and
#      the resumed job finishes with every sample exactly once per epoch.
#   2. One short epoch: by the time n2 has been slow for the restart window, what is left to
#      train gains less than a restart costs. auto does not restart; the job ends normally with
#      every sample once.
#   test_auto_restart.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
# A command that fails outside a test's own checks ends the script (set -e); say which one.
trap 'echo "FAIL: line $LINENO exited $?: $BASH_COMMAND" >&2' ERR
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
for tool in slurmctld slurmd munged sbatch; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
D=$(mktemp -d /tmp/antdt-slurm-auto.XXXXXX)
chmod 755 "$D"
cd "$D"  # a resubmitted job writes its output (antdt-<id>.out) to the submitting directory
cleanup() { "$src/scripts/slurm/local-slurm.sh" stop "$D/slurm" || true; rm -rf "$D"; }
trap cleanup EXIT
conf=$(ANTDT_SLURM_NODES=4 ANTDT_SLURMCTLD_PORT=6877 ANTDT_SLURMD_PORT=6890 \
       "$src/scripts/slurm/local-slurm.sh" start "$D/slurm") || { tail -20 "$D"/slurm/log/*.log; exit 1; }
eval "$conf"
fail() { echo "FAIL: $*"; for f in "$D"/run*/*.out "$D"/*.out "$D"/slurm/log/slurmctld.log; do [ -f "$f" ] && { echo "--- $f"; tail -40 "$f"; }; done; exit 1; }
[ "$(sinfo -h -N -o %N | sort -u | paste -sd, -)" = "n1,n2,n3,n4" ] || fail "expected four nodes n1..n4"

. "$src/tests/slurm/lib.sh"  # wait_job, wait_resubmitted, tcp_startup_failed
export ANTDT_TRAIN="$build/apps/antdt-train" ANTDT_LOG_LEVEL=warn ANTDT_RESTART_COOLDOWN=0
common=(--layers 8,16,4 --global-batch 60 --policy auto --virtual-device 0.001 --emulate-schedule @n2:10:0.2
        --checkpoint-every 5 --quiet)
submit() {  # RUN_DIR NAME DATA EPOCHS: a job on 3 nodes, waited for; sets job and state (its final one).
  local attempt
  for attempt in 1 2; do  # once more when Open MPI's TCP start-up failed
    job=$(ANTDT_RUN_DIR="$1" sbatch --parsable -N 3 --ntasks-per-node=1 -J "$2" -o "$1/job-%j.out" \
            "$src/scripts/slurm/antdt-train.sbatch" --data "$3" --epochs "$4" "${common[@]}")
    state=$(wait_job "$job")
    [ "$state" != COMPLETED ] && [ $attempt = 1 ] && tcp_startup_failed "$1/job-$job.out" && continue
    return 0
  done
}

# 1. It pays: three epochs of 6000 samples.
samples=6000
"$build/apps/antdt-datagen" -o "$D/train.h5" --samples $samples --dim 8 --classes 4 >/dev/null
mkdir -p "$D/run"
submit "$D/run" autorestart "$D/train.h5" 3
first=$job
[ "$state" = COMPLETED ] || fail "the first job ended as '$state' (it hands over with exit 0 after resubmitting)"
grep -q "antdt: kill-restart (exit 75)" "$D/run/job-$first.out" || fail "auto did not stop the first job for a kill-restart"
second=$(sed -n 's/^antdt: resubmitted as job \([0-9]*\).*/\1/p' "$D/run/job-$first.out")
[ -n "$second" ] || fail "no resubmission in the first job's output"
state=$(wait_resubmitted "$second" "$D/run/job-$second.out")
[ "$state" = COMPLETED ] || fail "the resubmitted job $second ended as '$state'"
ckpt="$D/run/autorestart-$first-ckpt"
[ "$(cat "$ckpt/antdt-restart-exclude")" = n2 ] || fail "the exclude file holds '$(cat "$ckpt/antdt-restart-exclude")', not n2"
python3 - "$D/run/summary-$first-0.json" "$D/run/summary-$second-0.json" $samples <<'PY' || fail "summary checks failed"
import json, sys
first, second, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
assert first["policy"] == "auto", first.get("policy")
r = first["restart"]
assert r["nodes"] == ["n2"], r
assert r["gain_seconds"] > r["cost_seconds"] > 0, r
assert 1 - r["throughput_now"] / r["throughput_after"] > 0.05, r  # above the min gain, as any change of auto's
assert "n2" not in second["nodes"] and len(second["nodes"]) == 3, second["nodes"]
assert [e["committed"] for e in second["epochs"]] == [n] * 3, second["epochs"]
assert second["duplicated_samples"] == 0 and second["missing_samples"] == 0
assert "restart" not in second, second.get("restart")
print("auto restarts where it pays: without", r["nodes"], "after step", r["step"], "; gain %.2f s > cost %.2f s" %
      (r["gain_seconds"], r["cost_seconds"]), "; resumed on", second["nodes"])
PY

# 2. It does not pay: one epoch of 1500 samples (25 steps); n2 is slow for the restart window
# only near the end, when what is left gains less than the restart's measured cost.
small=1500
"$build/apps/antdt-datagen" -o "$D/small.h5" --samples $small --dim 8 --classes 4 >/dev/null
mkdir -p "$D/run2"
submit "$D/run2" autostay "$D/small.h5" 1
[ "$state" = COMPLETED ] || fail "the short job ended as '$state'"
grep -q "antdt: kill-restart (exit 75)" "$D/run2/job-$job.out" && fail "auto restarted although it could not pay"
python3 - "$D/run2/summary-$job-0.json" $small <<'PY' || fail "summary checks of the short job failed"
import json, sys
s, n = json.load(open(sys.argv[1])), int(sys.argv[2])
assert "restart" not in s, s.get("restart")
assert sorted(s["nodes"]) == ["n1", "n2", "n3"], s["nodes"]
assert [e["committed"] for e in s["epochs"]] == [n], s["epochs"]
assert s["duplicated_samples"] == 0 and s["missing_samples"] == 0
print("auto does not restart where it does not pay: finished on", s["nodes"], "in one job")
PY
echo "PASS"
