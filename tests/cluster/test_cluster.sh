#!/usr/bin/env bash
# antdt on a cluster of nodes with network stacks of their own (scripts/slurm/netns-slurm.sh:
# one network namespace per node, one slurmd in each, joined by a bridge), so that ranks on
# different nodes talk over TCP, as on a real cluster, not through shared memory or loopback.
#   test_cluster.sh BUILD_DIR SOURCE_DIR CASE
# CASE:
#   nd_pool       --policy nd across 3 nodes picks the deadline pool (the log says so; the counter
#                 needs one-sided atomics across nodes), the traffic goes over each node's link,
#                 and every sample is trained once per epoch (counted from --sample-log)
#   kill_restart  a 3-node nd job whose node n2 turns slow restarts without it (exit 75,
#                 scripts/slurm/antdt.sbatch resubmits on n1, n3 and the spare n4), every sample
#                 once per epoch over both jobs
#   stall         a rank stopped mid-run (SIGSTOP of its process on n2) is named with its node,
#                 n2 goes to the exclude list, the job ends with exit 5 and the script resubmits
#                 it without n2; the new job completes, every sample once per epoch
#   phases        a rank stopped in each of the ten phases of a run (startup, probe, step, reduction,
#                 control exchange, evaluation, checkpoint write by rank 0 and by another rank,
#                 resume, end), one job per phase, five at a time (phases.py): exit 5 within the
#                 timeout and its grace, the rank and its node named, the waiting ranks asleep
#   slow_link     n3's link limited to 20 Mbit/s (tc tbf) and n2's compute at half speed: the
#                 step's all-reduce slows down for every rank alike, so dd lowers n2's share and
#                 not n3's (a smaller share cannot shorten an all-reduce of the same bytes)
# Exit 77 (skipped, with the reason) where network namespaces cannot be made.
set -euo pipefail
# A command that fails outside a test's own checks ends the script (set -e); say which one.
trap 'echo "FAIL: line $LINENO exited $?: $BASH_COMMAND" >&2' ERR
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd); case=${3:?CASE}
train=$build/apps/antdt-train netns=$src/scripts/slurm/netns-slurm.sh
cpus=2
case $case in nd_pool | slow_link) nodes=3 ;; phases) nodes=3 cpus=5 ;; kill_restart | stall) nodes=4 ;; *) echo "unknown case '$case'"; exit 2 ;; esac

D=$(mktemp -d "/tmp/antdt-cluster-$case.XXXXXX")
chmod 755 "$D"  # munged insists that every directory above its socket is world-executable
cleanup() { "$netns" stop "$D/slurm" >/dev/null 2>&1 || true; rm -rf "$D"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
rc=0
conf=$(ANTDT_NETNS_OWNER=$$ ANTDT_SLURM_CPUS=$cpus "$netns" start "$D/slurm" $nodes 2>"$D/start.err") || rc=$?
if [ "$rc" = 77 ]; then cat "$D/start.err"; exit 77; fi
[ "$rc" = 0 ] || { cat "$D/start.err"; tail -20 "$D"/slurm/log/*.log; exit 1; }
eval "$conf"
mkdir -p "$D/run"
cd "$D/run"
fail() {
  echo "FAIL: $*"
  for f in "$D"/run/*.out "$D/run/srun.log" "$D"/slurm/log/slurmctld.log; do [ -f "$f" ] && { echo "--- $f"; tail -30 "$f"; }; done
  exit 1
}
[ "$(sinfo -h -N -o %N | sort -u | paste -sd' ')" = "$(seq -f 'n%g' -s ' ' $nodes)" ] || fail "the nodes did not come up"
# debug: each rank says "MPI started" (startup_failed, below); the rest of debug is a few lines a run
export ANTDT_LOG_LEVEL=debug OPENBLAS_NUM_THREADS=1
# Open MPI ranks poll while they wait in MPI; with more ranks than this machine's two cores, a
# polling rank keeps the one it waits for off the core (a 3-rank all-reduce of 8 bytes took
# 6 ms instead of 0.6).
export OMPI_MCA_mpi_yield_when_idle=1

# A run's --sample-log files, one set per job and requeue: samples-<job>-<restart>.<rank>.
cat > "$D/train.sh" <<SH
#!/usr/bin/env bash
exec "$train" --sample-log "$D/run/samples-\${SLURM_JOB_ID:-0}-\${SLURM_RESTART_COUNT:-0}" "\$@"
SH
chmod +x "$D/train.sh"

wait_job() {  # waits until job $1 has left the queue; prints its final state
  for _ in $(seq 600); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && break
    sleep 0.2
  done
  scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p'
}
resubmitted() { sed -n 's/^antdt: resubmitted as job \([0-9]*\) .*/\1/p' "$1"; }
make_data() { "$build/apps/antdt-datagen" -o "$D/train.h5" --samples "$1" --dim 8 --classes 4 >/dev/null; }
submit() {  # NAME ARGS...: antdt.sbatch on 3 nodes, a rank each, with sample logs; prints the job id
  local name=$1
  shift
  ANTDT_PROGRAM=$D/train.sh ANTDT_RUN_DIR=$D/run ANTDT_RESTART_COOLDOWN=0 sbatch --parsable -N 3 --ntasks-per-node=1 \
    -J "$name" -o "$D/run/job-%j.out" "$src/scripts/slurm/antdt.sbatch" --data "$D/train.h5" --layers 8,16,4 \
    --global-batch 60 --quiet "$@"
}

# Whether a run's output (FILE) shows Open MPI 4.1.4's TCP start-up failing between the nodes:
# its own "connect() to ... failed: Operation now in progress (115)", or a rank that crashed
# inside MPI_Init (a core dump: a call through a null pointer in mca_btl_tcp.so, as a peer that
# had left MPI_Init connected to it), seen with the machine loaded. Each rank logs "MPI started"
# (debug level, above) as MPI_Init returns: a crash after the 3 ranks said it is antdt's own and
# is never retried.
startup_failed() {
  grep -q "failed to TCP connect\|connect() to .* failed" "$1" && return 0
  grep -q "Process received signal" "$1" && [ "$(grep -c 'debug\] MPI started' "$1")" -lt 3 ]
}
# srun ARGS..., its output appended to srun.log; once more when Open MPI's start-up failed. A
# hang ends at the timeout.
run_srun() {
  local attempt
  for attempt in 1 2; do
    if timeout 200 srun --mpi=pmix --kill-on-bad-exit=1 "$@" > "$D/run/attempt.log" 2>&1; then
      cat "$D/run/attempt.log" >> "$D/run/srun.log"
      return 0
    fi
    cat "$D/run/attempt.log" >> "$D/run/srun.log"
    startup_failed "$D/run/attempt.log" || return 1
    echo "note: Open MPI's TCP start-up failed (attempt $attempt)"
    rm -f "$D"/run/samples-*
  done
  return 1
}
# Whether a job's output shows Open MPI's TCP start-up failure (above) and no step of the run.
tcp_startup_failed() {
  startup_failed "$1" || return 1
  echo "note: Open MPI's TCP start-up failed in job $(basename "$1"); submitting again"
}
# wait_resubmitted ID: waits for job ID, which antdt.sbatch resubmitted, and requeues it once when
# Open MPI's TCP start-up failed in it (as for the first job above); prints its final state.
wait_resubmitted() {
  local state
  state=$(wait_job "$1")
  if [ "$state" != COMPLETED ] && tcp_startup_failed "$D/run/job-$1.out" >&2; then
    scontrol requeue "$1" >&2 && state=$(sleep 1; wait_job "$1")
  fi
  echo "$state"
}
exactly_once() { python3 "$src/tests/slurm/exactly_once.py" "$@"; }  # SAMPLES EPOCHS PREFIX...

case $case in
nd_pool)
  samples=3000
  make_data $samples
  # Bytes n2's eth0 has received (/proc/net is the reading process's network namespace's).
  rx() { "$netns" exec "$D/slurm" n2 sed 's/:/ /' /proc/net/dev | awk '$1 == "eth0" {print $2}'; }
  before=$(rx)
  run_srun -N 3 --ntasks-per-node=1 "$D/train.sh" --data "$D/train.h5" --layers 8,64,4 --global-batch 60 --epochs 2 \
    --policy nd --virtual-device 0.001 --emulate-speed 1,1,0.5 --summary-json "$D/run/summary.json" --log-level info \
    --quiet || fail "the nd run failed"
  after=$(rx)
  grep -q "policy=nd, pool=deadline" "$D/run/srun.log" || fail "the nd run did not pick the deadline pool across nodes"
  python3 - "$D/run/summary.json" $samples $((after - before)) <<'PY' || fail "summary checks failed"
import json, sys
s, n, rx = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
assert sorted(s["nodes"]) == ["n1", "n2", "n3"], s["nodes"]
assert [e["committed"] for e in s["epochs"]] == [n, n], s["epochs"]
assert s["duplicated_samples"] == 0 and s["missing_samples"] == 0
# 8,64,4: 836 parameters, 3.3 kB of gradient per step; every step's all-reduce reaches n2 by
# its own link (shared memory or loopback would leave eth0's counter still).
assert rx > s["steps"] * 3344, "n2's link carried %d bytes over %d steps" % (rx, s["steps"])
print("nd pool OK: deadline across", s["nodes"], "; n2's link received %d bytes over %d steps" % (rx, s["steps"]))
PY
  log=$(ls "$D"/run/samples-*-0.0) || fail "no sample log"
  exactly_once $samples 2 "${log%.0}" || fail "exactly-once check failed"
  ;;

kill_restart)
  samples=6000
  make_data $samples
  for attempt in 1 2; do
    first=$(submit ndrestart --epochs 3 --policy nd --virtual-device 0.001 --emulate-schedule @n2:10:0.2 --checkpoint-every 5)
    state=$(wait_job "$first")
    [ "$state" != COMPLETED ] && [ $attempt = 1 ] && tcp_startup_failed "$D/run/job-$first.out" && continue
    break
  done
  [ "$state" = COMPLETED ] || fail "the first job did not hand over (exit 0 after resubmitting)"
  grep -q "antdt: kill-restart (exit 75)" "$D/run/job-$first.out" || fail "the first job did not stop for a kill-restart"
  second=$(resubmitted "$D/run/job-$first.out")
  [ -n "$second" ] || fail "no resubmission in the first job's output"
  [ "$(wait_resubmitted "$second")" = COMPLETED ] || fail "the resubmitted job $second did not complete"
  ckpt=$D/run/ndrestart-$first-ckpt
  [ "$(cat "$ckpt/antdt-restart-exclude")" = n2 ] || fail "the exclude file holds '$(cat "$ckpt/antdt-restart-exclude")', not n2"
  python3 - "$D/run/summary-$first-0.json" "$D/run/summary-$second-0.json" <<'PY' || fail "summary checks failed"
import json, sys
first, second = (json.load(open(p)) for p in sys.argv[1:])
assert sorted(first["nodes"]) == ["n1", "n2", "n3"], first["nodes"]
r = first["restart"]
assert r["nodes"] == ["n2"] and r["gain_seconds"] > r["cost_seconds"] > 0 and r["step"] > 10, r
assert sorted(second["nodes"]) == ["n1", "n3", "n4"], second["nodes"]
print("kill-restart OK: without", r["nodes"], "after step", r["step"], "; gain %.2f s > cost %.2f s; resumed on %s" %
      (r["gain_seconds"], r["cost_seconds"], second["nodes"]))
PY
  exactly_once $samples 3 "$D/run/samples-$first-0" "$D/run/samples-$second-0" || fail "exactly-once check failed"
  ;;

stall)
  samples=1800
  make_data $samples
  # 60 steps of 100 ms of (virtual) compute each. The stop lands in n2's compute, so the other
  # ranks wait for it at the step gate: 30 ms after n2 has logged step 12's samples, which it
  # does at the end of step 12, just before step 13's compute (no checkpoint in between: one is
  # written every 5 steps). A stop anywhere else is not what this case tests (in the reduction the
  # watchdog ends the job with the node unknown).
  for attempt in 1 2; do
    first=$(submit stall --epochs 2 --policy dd --virtual-device 0.005 --step-timeout 3 --checkpoint-every 5)
    pid='' log=''
    for _ in $(seq 300); do
      for p in $("$netns" pids "$D/slurm" n2); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = antdt-train ] || continue
        pid=$p
        # The process may be gone by now (a job that failed at start-up): find then fails, and
        # under pipefail the assignment would end the script before the second attempt.
        log=$(find "/proc/$p/fd" -lname "$D/run/samples-$first-0.*" -printf '%l\n' 2>/dev/null | head -1 || true)
      done
      [ -n "$log" ] || [ -z "$(squeue -h -j "$first" 2>/dev/null)" ] && break
      sleep 0.1
    done
    [ -z "$log" ] && [ $attempt = 1 ] && tcp_startup_failed "$D/run/job-$first.out" && continue
    [ -n "$log" ] || fail "no antdt-train process on n2 writing its sample log"
    python3 - "$pid" "$log" <<'PY' || fail "n2's rank did not reach step 13"
import os, signal, sys, time
pid, log = int(sys.argv[1]), sys.argv[2]
for _ in range(30000):
    with open(log) as f:
        if any(line.startswith("12 ") for line in f):
            time.sleep(0.03)
            os.kill(pid, signal.SIGSTOP)
            sys.exit(0)
    time.sleep(0.002)
sys.exit(1)
PY
    echo "stopped rank process $pid on n2 in step 13"
    break
  done
  [ "$(wait_job "$first")" = COMPLETED ] || fail "the stalled job did not hand over (exit 0 after resubmitting)"
  out=$D/run/job-$first.out
  grep -q "antdt: exit code 5$" "$out" || fail "the stalled job did not end with exit code 5"
  grep -q "error.*rank [0-9] (node n2) has not answered in " "$out" || fail "the stalled rank was not named with n2"
  grep -Eq "error.*node n[134]\)" "$out" && fail "a healthy node was named"
  second=$(resubmitted "$out")
  [ -n "$second" ] || fail "no resubmission after the stall"
  [ "$(wait_resubmitted "$second")" = COMPLETED ] || fail "the resubmitted job $second did not complete"
  ckpt=$D/run/stall-$first-ckpt
  [ "$(cat "$ckpt/antdt-restart-exclude")" = n2 ] || fail "the exclude file holds '$(cat "$ckpt/antdt-restart-exclude" 2>/dev/null)', not n2"
  python3 - "$D/run/summary-$second-0.json" $samples <<'PY' || fail "summary checks failed"
import json, sys
s, n = json.load(open(sys.argv[1])), int(sys.argv[2])
assert sorted(s["nodes"]) == ["n1", "n3", "n4"], s["nodes"]
assert [e["committed"] for e in s["epochs"]] == [n, n], s["epochs"]
print("stall OK: resumed without n2, on", s["nodes"])
PY
  exactly_once $samples 2 "$D/run/samples-$first-0" "$D/run/samples-$second-0" || fail "exactly-once check failed"
  ;;

phases)
  python3 "$src/tests/cluster/phases.py" "$build" "$D/run" || fail "a phase was not guarded on the cluster"
  ;;

slow_link)
  samples=3000
  make_data $samples
  # 8,256,256,4: 68,612 parameters, 274 kB of gradient: at 20 Mbit/s the all-reduce takes about
  # 0.15 s, against 40 ms of compute per rank at the equal split.
  run() {  # NAME: a dd run of 50 steps; n2 computes at half speed
    run_srun -N 3 --ntasks-per-node=1 "$train" --data "$D/train.h5" --layers 8,256,256,4 --global-batch 60 \
      --steps 50 --policy dd --virtual-device 0.002 --emulate-schedule @n2:0:0.5 --min-interval 5 \
      --summary-json "$D/run/summary-$1.json" --quiet || fail "the $1 run failed"
  }
  run free
  "$netns" limit "$D/slurm" n3 20mbit
  run limited
  "$netns" limit "$D/slurm" n3 off
  python3 - "$D/run/summary-free.json" "$D/run/summary-limited.json" <<'PY' || fail "the slow link checks failed"
import json, sys
free, limited = (json.load(open(p)) for p in sys.argv[1:])
for s in (free, limited):
    assert s["nodes"] == ["n1", "n2", "n3"], s["nodes"]
    assert s["plan_changes"] >= 1, "dd did not rebalance the half-speed rank"
# The limit is real: every step's all-reduce crosses n3's link (274 kB at 2.5 MB/s, over 0.1 s).
grow = limited["measured_step_seconds"] - free["measured_step_seconds"]
assert grow > 0.06, "the 20 Mbit/s limit added only %.3f s to a step" % grow
for s in (free, limited):
    b = s["final_split"]
    # n2 (half speed) gets about half of n1's share; n3 keeps n1's share, link or not.
    assert b[1] < 0.75 * b[0], ("dd did not lower the half-speed rank", b)
    assert abs(b[2] - b[0]) <= 3, ("n3's share moved away from n1's", b)
print("slow link OK: the limit added %.3f s to a step; final splits %s (free) and %s (n3 limited)" %
      (grow, free["final_split"], limited["final_split"]))
PY
  ;;
esac
echo "PASS"
