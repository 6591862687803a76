#!/usr/bin/env bash
# Every way a run ends, through scripts/slurm/antdt.sbatch on a real Slurm (4 nodes on
# localhost), with a stand-in program (fake-program.sh) that ends as each case needs:
#   - the time limit's early warning (SIGUSR1 to the batch script) and exit 76: requeued, and
#     the next run completes; each run's outputs are its own (summary-<job>-<restart>.json);
#   - scancel while it runs: it stops with 76 and the job ends for good, CANCELLED, not queued
#     again, with its checkpoint directory kept;
#   - 76 from a signal that was not the warning (scancel --signal=TERM): not requeued;
#   - Slurm's own requeue (scontrol requeue from outside): the script says the job is queued
#     again, and does not try to requeue it itself;
#   - exit 75 (kill-restart) then 5 (a stall), each naming a node: each resubmission leaves out
#     every node named so far, under one ANTDT_MAX_RESTARTS budget, which, spent, ends the run;
#   - ANTDT_PROGRAM that is not a program: exit 2 with one line; a program that ends 0 without
#     the summary it was asked for: exit 1 (it may never have run); 143 from the launcher after
#     the run wrote its kill-restart records: 75.
#   test_sbatch_exits.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
# A command that fails outside a test's own checks ends the script (set -e); say which one.
trap 'echo "FAIL: line $LINENO exited $?: $BASH_COMMAND" >&2' ERR
src=$(cd "$2" && pwd)
sbatch_script=$src/scripts/slurm/antdt.sbatch fake=$src/tests/slurm/fake-program.sh

# No Slurm needed: a program that is not there is bad usage.
pre=$(mktemp -d)
out=$(ANTDT_PROGRAM=/nonexistent/antdt-program ANTDT_RUN_DIR=$pre bash "$sbatch_script" 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "ANTDT_PROGRAM '/nonexistent/antdt-program' is not an executable" <<<"$out" ||
  { echo "FAIL: a missing ANTDT_PROGRAM gave exit $rc: $out"; exit 1; }

# Exit 0 without the summary the run was asked for is no success: the program may never have
# run (srun reports 0 for a step it failed to launch).
out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ANTDT_LAUNCHER=mpirun ANTDT_PROGRAM=$fake \
      FAKE_PLAN=nosummary ANTDT_RUN_DIR=$pre SLURM_JOB_ID=7 bash "$sbatch_script" 2>&1) && rc=0 || rc=$?
[ "$rc" = 1 ] && grep -q "ended with 0 but wrote no summary" <<<"$out" ||
  { echo "FAIL: exit 0 without a summary gave exit $rc: $out"; exit 1; }

# A kill-restart whose launcher reports 143 (srun's --kill-on-bad-exit ended a rank that was
# still finishing its 75): antdt-restart-pending written during the launch makes it a 75 (and
# without Slurm the resubmission then fails, keeping 75); a pending file from before does not.
fake_run() {  # PLAN: the script under mpirun, one rank, job 8; sets out and rc
  out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ANTDT_LAUNCHER=mpirun ANTDT_PROGRAM=$fake \
        FAKE_PLAN=$1 ANTDT_RUN_DIR=$pre ANTDT_RUN_NAME=k75 SLURM_JOB_ID=8 bash "$sbatch_script" 2>&1) && rc=0 || rc=$?
}
fake_run killed75
[ "$rc" = 75 ] && grep -q "antdt: exit code 143" <<<"$out" && grep -q "the run exited for a kill-restart" <<<"$out" ||
  { echo "FAIL: a kill-restart reported as 143 gave exit $rc: $out"; exit 1; }
echo 1 > "$pre/k75-ckpt/antdt-restart-pending"  # the second 1 of 1970: long before this launch
fake_run 143
[ "$rc" = 143 ] && ! grep -q "the run exited for a kill-restart" <<<"$out" ||
  { echo "FAIL: a stale antdt-restart-pending turned exit 143 into $rc: $out"; exit 1; }
rm -rf "$pre"
echo "ok: exit 143 after a kill-restart's records counts as 75, and not with older records"

for tool in slurmctld slurmd munged sbatch; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
D=$(mktemp -d /tmp/antdt-slurm-exits.XXXXXX)
chmod 755 "$D"
cleanup() { "$src/scripts/slurm/local-slurm.sh" stop "$D/slurm" || true; rm -rf "$D"; }
trap cleanup EXIT
conf=$(ANTDT_SLURM_NODES=4 ANTDT_SLURMCTLD_PORT=6867 ANTDT_SLURMD_PORT=6870 \
       "$src/scripts/slurm/local-slurm.sh" start "$D/slurm") || { tail -20 "$D"/slurm/log/*.log; exit 1; }
eval "$conf"
mkdir -p "$D/run"
cd "$D/run"  # nothing should land here: each job writes NAME-<id>.out, as -o asks, resubmissions too
fail() { echo "FAIL: $*"; for f in "$D"/run/*.out "$D"/slurm/log/slurmctld.log; do [ -f "$f" ] && { echo "--- $f"; tail -25 "$f"; }; done; exit 1; }
export ANTDT_PROGRAM=$fake ANTDT_RUN_DIR=$D/run ANTDT_RESTART_COOLDOWN=0

state() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
release() {  # starts requeued job $1 now (Slurm holds it back), once its node has cleaned up
  # after its first run: a step launched beside the old one's teardown can fail to start. And
  # not in the second in which its first run's credential was revoked: slurmd compares whole
  # seconds and kills such a start ("Job credential revoked"; a CI run hit it). So now+1.
  for _ in $(seq 100); do [ "$(sinfo -h -n n1 -o %T)" = idle ] && break; sleep 0.1; done
  scontrol update JobId="$1" StartTime=now+1 2>/dev/null || true
}
wait_gone() {  # waits until job $1 has left the queue; prints its final state
  for _ in $(seq 300); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && break
    sleep 0.2
  done
  state "$1" JobState
}
wait_started() {  # waits until the fake program waits for a signal in job $1 (run $2 of checkpoint dir $3)
  for _ in $(seq 150); do
    [ "$(awk '{print $1}' "$3/fake-waiting" 2>/dev/null | sort -u | wc -l)" -ge "$2" ] && return 0
    sleep 0.2
  done
  fail "job $1 did not start its program"
}
next_job() {  # JOB OUT: JOB handed over (resubmitted, then COMPLETED): prints the new job's id
  [ "$(wait_gone "$1")" = COMPLETED ] || return 1
  sed -n 's/^antdt: resubmitted as job \([0-9]*\) .*/\1/p' "$2" | grep .
}
submit() {  # RUN_NAME PLAN SBATCH_ARGS...: prints the job id
  local name=$1 plan=$2
  shift 2
  ANTDT_RUN_NAME=$name FAKE_PLAN=$plan sbatch --parsable -o "$D/run/$name-%j.out" "$@"
}

# 1. The time limit's warning: Slurm sends SIGUSR1 to the batch script (--signal=B:USR1@...),
#    which passes it on; the program stops with 76; the script requeues; the next run ends 0.
id=$(submit limit wait,0 -n 1 "$sbatch_script")
wait_started "$id" 1 "$D/run/limit-ckpt"
scancel --batch --signal=USR1 "$id"
for _ in $(seq 100); do [ "$(state "$id" Restarts)" = 1 ] && break; sleep 0.2; done
[ "$(state "$id" Restarts)" = 1 ] || fail "the warned job was not requeued"
release "$id"
[ "$(wait_gone "$id")" = COMPLETED ] || fail "the requeued job did not complete"
out=$D/run/limit-$id.out
grep -q "got SIGUSR1: stopping" "$out" || fail "the program did not get the warning"
grep -q "stopped with a checkpoint before the time limit; requeueing job $id" "$out" || fail "no requeue on the warning"
python3 - "$D/run" "$id" <<'PY' || fail "each run must keep its own summary"
import json, sys
d, job = sys.argv[1], sys.argv[2]
runs = [json.load(open("%s/summary-%s-%d.json" % (d, job, r))) for r in (0, 1)]
assert [(s["restart"], s["word"]) for s in runs] == [(0, "wait"), (1, "0")], runs
PY
echo "ok: the warning requeued the job; summary-$id-0.json and summary-$id-1.json kept apart"

# 2. scancel: the program stops with 76, and the job ends for good: CANCELLED, not pending again.
id=$(submit cancel wait -n 1 "$sbatch_script")
wait_started "$id" 1 "$D/run/cancel-ckpt"
scancel "$id"
[ "$(wait_gone "$id")" = CANCELLED ] || fail "the cancelled job ended as '$(state "$id" JobState)'"
sleep 3  # a requeue would show now
[ -z "$(squeue -h -j "$id" 2>/dev/null)" ] || fail "the cancelled job is queued again"
[ "$(state "$id" Restarts)" = 0 ] || fail "the cancelled job was requeued"
out=$D/run/cancel-$id.out
grep -q "got SIGTERM: stopping with a checkpoint" "$out" || fail "the program was not stopped by the cancel's SIGTERM"
grep -q "was cancelled (scancel) or preempted: not requeued.*ANTDT_RUN_NAME=cancel" "$out" ||
  fail "the script did not say the job ends for good and how to resume"
[ -d "$D/run/cancel-ckpt" ] || fail "the cancelled run's checkpoint directory is gone"
echo "ok: scancel ended the job for good"

# 3. A stop signal to the program alone (not the warning): 76, not requeued.
id=$(submit signal wait -n 1 "$sbatch_script")
wait_started "$id" 1 "$D/run/signal-ckpt"
scancel --signal=TERM "$id"
state=$(wait_gone "$id")
[ "$state" = FAILED ] || fail "the job stopped by a signal to its program ended as '$state'"
[ "$(state "$id" Restarts)" = 0 ] || fail "a signal that was not the warning requeued the job"
grep -q "stopped by a signal that was not the time limit's warning: not requeued" "$D/run/signal-$id.out" ||
  fail "no word of why the job was not requeued"
echo "ok: a signal to the program alone stopped it for good"

# 4. Slurm's own requeue: the script must see the job is queued again and not requeue it itself.
id=$(ANTDT_TRAIN=$fake ANTDT_PROGRAM='' submit slurmrq wait,0 -n 1 "$src/scripts/slurm/antdt-train.sbatch")
wait_started "$id" 1 "$D/run/slurmrq-ckpt"
scontrol requeue "$id"
for _ in $(seq 100); do grep -q "antdt: exit code" "$D/run/slurmrq-$id.out" 2>/dev/null && break; sleep 0.2; done
release "$id"
[ "$(wait_gone "$id")" = COMPLETED ] || fail "the job Slurm requeued did not complete"
out=$D/run/slurmrq-$id.out
grep -q "Slurm has requeued job $id itself" "$out" || fail "the script did not see Slurm's own requeue"
! grep -q "requeue failed\|Job is pending" "$out" || fail "the script tried to requeue a job already queued"
[ -f "$D/run/summary-$id-0.json" ] && [ -f "$D/run/summary-$id-1.json" ] || fail "a run's summary is missing"
echo "ok: Slurm's own requeue was recognised (ANTDT_TRAIN and antdt-train.sbatch still work)"

# 5. A kill-restart (75) naming a node, then a stall (5) naming another: each resubmission leaves
#    out every node named so far; the third job completes.
ckpt=$D/run/chain-ckpt
first=$(ANTDT_MAX_RESTARTS=2 submit chain 75@last,5@last,0 -N 2 --ntasks-per-node=1 "$sbatch_script")
second=$(next_job "$first" "$D/run/chain-$first.out") || fail "the first job did not resubmit after exit 75"
third=$(next_job "$second" "$D/run/chain-$second.out") || fail "the second job did not resubmit after exit 5"
[ "$(wait_gone "$third")" = COMPLETED ] || fail "the third job did not complete"
grep -q "a rank stalled (exit 5); this job's nodes to leave out: [a-z0-9]" "$D/run/chain-$second.out" ||
  fail "the stall's node was not named"
python3 - "$ckpt" "$first" "$second" "$third" <<'PY' || fail "the resubmissions did not leave out the named nodes"
import collections, sys
ckpt, jobs = sys.argv[1], sys.argv[2:]
nodes = collections.defaultdict(dict)  # job -> {task: node}
for line in open(ckpt + "/fake-starts"):
    key, task, node = line.split()
    nodes[key.split(".")[0]][int(task)] = node
excluded = open(ckpt + "/antdt-restart-exclude").read().split()
assert excluded == [nodes[jobs[0]][1], nodes[jobs[1]][1]], (excluded, dict(nodes))
assert excluded[0] not in nodes[jobs[1]].values(), ("the stall's job ran on the slow node", dict(nodes))
assert not set(excluded) & set(nodes[jobs[2]].values()), ("the last job ran on a left-out node", dict(nodes))
assert open(ckpt + "/antdt-restart-count").read().strip() == "2"
print("chain OK: left out", excluded, "; jobs ran on", [sorted(nodes[j].values()) for j in jobs])
PY
echo "ok: exit 75 and 5 each resubmitted without the named nodes"

# 6. One budget for both: with ANTDT_MAX_RESTARTS=1, the second stall ends the run (exit 5).
first=$(ANTDT_MAX_RESTARTS=1 submit budget 5@last,5@last,0 -N 2 --ntasks-per-node=1 "$sbatch_script")
second=$(next_job "$first" "$D/run/budget-$first.out") || fail "the first stalled job did not resubmit"
[ "$(wait_gone "$second")" = FAILED ] || fail "the second stall, past the budget, did not end the run"
grep -q "1 resubmissions already (ANTDT_MAX_RESTARTS=1): not resubmitting" "$D/run/budget-$second.out" ||
  fail "no word of the spent budget"
echo "ok: the budget ended the run"
echo "PASS"
