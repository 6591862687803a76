#!/usr/bin/env bash
# antdt under a real single-node Slurm on localhost: an sbatch job runs antdt-train through
# `srun --mpi=pmix` (scripts/slurm/antdt-train.sbatch); outputs carry the job id and the run
# of it (summary-<job id>-<restart>.json); a job whose
# rank dies fails fast, and a resubmission on another number of tasks resumes mid-epoch with
# every sample committed exactly once.
#   test_slurm.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
# A command that fails outside a test's own checks ends the script (set -e); say which one.
trap 'echo "FAIL: line $LINENO exited $?: $BASH_COMMAND" >&2' ERR
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
for tool in slurmctld slurmd munged sbatch; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
D=$(mktemp -d /tmp/antdt-slurm.XXXXXX)
chmod 755 "$D"   # munged insists that every directory above its socket is world-executable
cleanup() { "$src/scripts/slurm/local-slurm.sh" stop "$D/slurm" || true; rm -rf "$D"; }
trap cleanup EXIT
conf=$("$src/scripts/slurm/local-slurm.sh" start "$D/slurm") || { tail -20 "$D"/slurm/log/*.log; exit 1; }
eval "$conf"
fail() { echo "FAIL: $*"; for f in "$D"/run/*.out "$D"/slurm/log/slurmctld.log; do [ -f "$f" ] && { echo "--- $f"; tail -30 "$f"; }; done; exit 1; }

"$build/apps/antdt-datagen" -o "$D/train.h5" --samples 900 --dim 8 --classes 4 >/dev/null
mkdir -p "$D/run"
export ANTDT_TRAIN="$build/apps/antdt-train" ANTDT_RUN_DIR="$D/run" ANTDT_LOG_LEVEL=warn
common=(--data "$D/train.h5" --layers 8,16,4 --global-batch 30 --epochs 2 --policy dd --checkpoint-every 4 --quiet)

. "$src/tests/slurm/lib.sh"  # wait_job

# 1. A job that loses rank 1 at step 9 must end (not hang) and fail. It is a named run, which a
#    later submission of the same name continues.
id=$(ANTDT_RUN_NAME=elastic sbatch --parsable -n 4 -o "$D/run/fail-%j.out" "$src/scripts/slurm/antdt-train.sbatch" \
       "${common[@]}" --fail-at-step 9 --fail-rank 1)
state=$(wait_job "$id")
[ "$state" = FAILED ] || fail "the job with a killed rank ended as '$state', expected FAILED"
ls "$D/run/elastic-ckpt"/ckpt-*.h5 >/dev/null 2>&1 || fail "no checkpoint was written before the failure"

# 2. Resubmitted on 3 tasks, it resumes from the newest checkpoint and completes both epochs.
id=$(ANTDT_RUN_NAME=elastic sbatch --parsable -n 3 -o "$D/run/resume-%j.out" "$src/scripts/slurm/antdt-train.sbatch" \
       "${common[@]}")
state=$(wait_job "$id")
[ "$state" = COMPLETED ] || fail "the resumed job ended as '$state'"
summary="$D/run/summary-$id-0.json"
[ -f "$summary" ] || fail "no summary tagged with job id $id and restart 0"
python3 - "$summary" "$id" <<'PY' || fail "summary check failed"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["job_id"] == sys.argv[2], s["job_id"]
assert s["ranks"] == 3, s["ranks"]
assert s["samples"] == 1800, s["samples"]
assert [e["committed"] for e in s["epochs"]] == [900, 900], s["epochs"]
assert s["duplicated_samples"] == 0 and s["missing_samples"] == 0
print("slurm resume OK: job", s["job_id"], "ranks", s["ranks"], "samples", s["samples"])
PY
# 3. Without a run name every submission is a run of its own (the default job name is the same for
#    all of them), and a requeue of one keeps its job id, so it resumes its own checkpoints.
short=(--data "$D/train.h5" --layers 8,16,4 --global-batch 30 --steps 6 --checkpoint-every 3 --quiet)
a=$(sbatch --parsable -n 2 -o "$D/run/a-%j.out" "$src/scripts/slurm/antdt-train.sbatch" "${short[@]}")
[ "$(wait_job "$a")" = COMPLETED ] || fail "job $a did not complete"
b=$(sbatch --parsable -n 2 -o "$D/run/b-%j.out" "$src/scripts/slurm/antdt-train.sbatch" "${short[@]}")
[ "$(wait_job "$b")" = COMPLETED ] || fail "job $b did not complete: a second submission must not meet the first's checkpoints"
ls "$D/run/antdt-train-$a-ckpt"/ckpt-*.h5 "$D/run/antdt-train-$b-ckpt"/ckpt-*.h5 >/dev/null 2>&1 ||
  fail "each submission should checkpoint into <job name>-<job id>-ckpt"
scontrol requeue "$a" || fail "scontrol requeue $a failed"
# Slurm 22.05 holds a requeued job back for two minutes (its BeginTime); start it now instead,
# but not in the second its first run's credential was revoked (slurmd compares whole seconds
# and kills such a start: "Job credential revoked").
scontrol update JobId="$a" StartTime=now+1 || fail "cannot release the requeued job $a"
[ "$(wait_job "$a")" = COMPLETED ] || fail "the requeued job $a did not complete"
grep -q "restart 1" "$D/run/a-$a.out" || fail "job $a was not restarted by the requeue"
python3 - "$D/run/summary-$a-0.json" "$D/run/summary-$a-1.json" <<'PY' || fail "the requeued job did not resume its own checkpoints"
import json, sys
first, requeued = (json.load(open(p)) for p in sys.argv[1:])
assert first["steps"] == 6, f"the first run's summary says {first['steps']} steps; the requeue must not overwrite it"
assert requeued["steps"] == 0, f"the requeued job ran {requeued['steps']} steps; it should have resumed at step 6 with none left"
print("slurm requeue OK: resumed its own checkpoints; both runs' summaries kept")
PY
echo "PASS"
