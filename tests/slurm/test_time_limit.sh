#!/usr/bin/env bash
# A job that hits its time limit resumes with nothing lost, on a real Slurm on localhost:
# scripts/slurm/antdt-train.sbatch with a 40-second limit and SIGUSR1 15 s before it. Slurm
# checks time limits every 30 s from slurmctld's start, so the warning comes about 28 s into the
# job. The training (about 38 s of it, on the virtual device) is stopped by the signal (or by the
# limit's SIGTERM) after a step, checkpoints it and exits 76; the script requeues the job, which
# resumes from that checkpoint about 6 s later (local-slurm.sh's scheduling passes) and finishes
# the last 10 s well before its own warning (the check 30 s on finds 17 s of its limit left). Every sample is trained exactly once per
# epoch, checked from each run's --sample-log (not antdt's own counters). Then scancel of a
# running job ends it for good, and a new submission of the same run resumes it.
#   test_time_limit.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
# A command that fails outside a test's own checks ends the script (set -e); say which one.
trap 'echo "FAIL: line $LINENO exited $?: $BASH_COMMAND" >&2' ERR
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
for tool in slurmctld slurmd munged sbatch; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
D=$(mktemp -d /tmp/antdt-slurm-limit.XXXXXX)
chmod 755 "$D"
cleanup() { "$src/scripts/slurm/local-slurm.sh" stop "$D/slurm" || true; rm -rf "$D"; }
trap cleanup EXIT
conf=$(ANTDT_SLURM_CPUS=4 ANTDT_SLURMCTLD_PORT=6857 ANTDT_SLURMD_PORT=6858 \
       "$src/scripts/slurm/local-slurm.sh" start "$D/slurm") || { tail -20 "$D"/slurm/log/*.log; exit 1; }
eval "$conf"
fail() { echo "FAIL: $*"; for f in "$D"/run/*.out "$D"/slurm/log/slurmctld.log; do [ -f "$f" ] && { echo "--- $f"; tail -60 "$f"; }; done; exit 1; }

samples=2400
"$build/apps/antdt-datagen" -o "$D/train.h5" --samples $samples --dim 8 --classes 4 >/dev/null
mkdir -p "$D/run"
# Each run of a job (SLURM_RESTART_COUNT 0, 1, ...) logs its samples to its own files.
cat > "$D/train.sh" <<SH
#!/usr/bin/env bash
exec "$build/apps/antdt-train" --sample-log "$D/run/samples-\${SLURM_JOB_ID}-\${SLURM_RESTART_COUNT:-0}" "\$@"
SH
chmod +x "$D/train.sh"
export ANTDT_TRAIN="$D/train.sh" ANTDT_RUN_DIR="$D/run" ANTDT_RUN_NAME=limit ANTDT_LOG_LEVEL=warn
# 2 epochs of 2400 samples at B=40: 120 steps of 2 ranks x 20 samples x 16 ms = 0.32 s each.
args=(--data "$D/train.h5" --layers 8,16,4 --global-batch 40 --epochs 2 --virtual-device 0.016 --quiet)
id=$(sbatch --parsable -n 2 --time=0:40 --signal=B:USR1@15 -J limit -o "$D/run/job-%j.out" \
       "$src/scripts/slurm/antdt-train.sbatch" "${args[@]}")
for _ in $(seq 1500); do  # up to 5 minutes
  state=$(scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2)
  case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 0.2
done
[ "$state" = COMPLETED ] || fail "the job ended as '$state'"
out="$D/run/job-$id.out"
stops=$(grep -c "antdt: exit code 76" "$out" || true)
[ "$stops" -ge 1 ] || fail "the time limit never stopped the training (no exit code 76)"
grep -q "antdt: exit code 0" "$out" || fail "the last run did not finish"
runs=()
for r in $(seq 0 "$stops"); do runs+=("$D/run/samples-$id-$r"); done
python3 "$src/tests/slurm/exactly_once.py" $samples 2 "${runs[@]}" --stops-at-checkpoints || fail "exactly-once check failed"
python3 - "$D/run" "$id" $((stops + 1)) $samples <<'PY' || fail "summary check failed"
import glob, json, os, sys
run_dir, job, runs, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
# One summary per run of the job (summary-<job>-<restart>.json), none overwritten by the next.
for r in range(runs):
    assert os.path.exists(os.path.join(run_dir, "summary-%s-%d.json" % (job, r))), "no summary of run %d" % r
last = json.load(open(os.path.join(run_dir, "summary-%s-%d.json" % (job, runs - 1))))
assert [e["committed"] for e in last["epochs"]] == [n, n], last["epochs"]
print("time limit OK: %d stop(s) by signal, %d runs" % (runs - 1, runs))
PY

# 2. scancel: the training stops with a checkpoint and the job ends for good (CANCELLED, not
#    queued again, as users expect of scancel); a later submission of the same run resumes there.
fast=(--data "$D/train.h5" --layers 8,16,4 --global-batch 40 --epochs 2 --virtual-device 0.002 --checkpoint-every 10
      --quiet)
id=$(ANTDT_RUN_NAME=cancel sbatch --parsable -n 2 -o "$D/run/cancel-%j.out" "$src/scripts/slurm/antdt-train.sbatch" "${fast[@]}")
for _ in $(seq 300); do
  [ "$(cat "$D/run/samples-$id-0".* 2>/dev/null | awk '$1 >= 25' | wc -l)" -gt 0 ] && break
  sleep 0.1
done
scancel "$id"
for _ in $(seq 300); do [ -z "$(squeue -h -j "$id" 2>/dev/null)" ] && break; sleep 0.2; done
sleep 3  # a requeue would show by now
state=$(scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
[ "$state" = CANCELLED ] || fail "the cancelled job is '$state'"
scontrol show job "$id" | grep -q "Restarts=0" || fail "the cancelled job was requeued"
grep -q "cancelled (scancel) or preempted: not requeued" "$D/run/cancel-$id.out" || fail "no word that the job ends for good"
ls "$D/run/cancel-ckpt"/ckpt-*.h5 >/dev/null 2>&1 || fail "the cancelled run left no checkpoint"
again=$(ANTDT_RUN_NAME=cancel sbatch --parsable -n 2 -o "$D/run/cancel-%j.out" "$src/scripts/slurm/antdt-train.sbatch" "${fast[@]}")
for _ in $(seq 600); do [ -z "$(squeue -h -j "$again" 2>/dev/null)" ] && break; sleep 0.2; done
scontrol show job "$again" | grep -q "JobState=COMPLETED" || fail "the resubmitted run did not complete"
python3 "$src/tests/slurm/exactly_once.py" $samples 2 "$D/run/samples-$id-0" "$D/run/samples-$again-0" ||
  fail "exactly-once check over the cancel failed"
echo "scancel OK: job $id cancelled for good; job $again resumed the run"
echo "PASS"
