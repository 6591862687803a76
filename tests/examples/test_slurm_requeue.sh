#!/usr/bin/env bash
# The sbatch script that runs antdt-train runs a program of your own just as well: pointed at
# the MLP example (ANTDT_PROGRAM), on a real Slurm on localhost, with a 40-second limit and
# SIGUSR1 15 s before it. Slurm checks time limits every 30 s from slurmctld's start, so the
# warning comes about 28 s into the job; the training (about 38 s, on the virtual device) stops
# after its step, checkpoints it and exits 76; the script requeues the job, which resumes from
# that checkpoint (about 6 s later: local-slurm.sh's scheduling passes) and finishes the run. Every sample is
# trained exactly once per epoch, counted from each run's --sample-log (not antdt's counters).
#   test_slurm_requeue.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
# A command that fails outside a test's own checks ends the script (set -e); say which one.
trap 'echo "FAIL: line $LINENO exited $?: $BASH_COMMAND" >&2' ERR
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
for tool in slurmctld slurmd munged sbatch; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
script=$src/scripts/slurm/antdt.sbatch
[ -e "$script" ] || script=$src/scripts/slurm/antdt-train.sbatch
# The script learns to run any program as ANTDT_PROGRAM (issue 24); until it does, there is
# nothing to test here.
grep -q ANTDT_PROGRAM "$script" || { echo "SKIP: $script does not take ANTDT_PROGRAM yet"; exit 77; }
D=$(mktemp -d /tmp/antdt-example-slurm.XXXXXX)
chmod 755 "$D"
cleanup() { "$src/scripts/slurm/local-slurm.sh" stop "$D/slurm" || true; rm -rf "$D"; }
trap cleanup EXIT
conf=$(ANTDT_SLURM_CPUS=4 ANTDT_SLURMCTLD_PORT=6875 ANTDT_SLURMD_PORT=6876 \
       "$src/scripts/slurm/local-slurm.sh" start "$D/slurm") || { tail -20 "$D"/slurm/log/*.log; exit 1; }
eval "$conf"
fail() { echo "FAIL: $*"; for f in "$D"/run/*.out "$D"/slurm/log/slurmctld.log; do [ -f "$f" ] && { echo "--- $f"; tail -60 "$f"; }; done; exit 1; }

samples=2048 epochs=4
mkdir -p "$D/run"
# Each run of the job (SLURM_RESTART_COUNT 0, 1, ...) logs its samples to its own files.
cat > "$D/mlp.sh" <<SH
#!/usr/bin/env bash
exec "$build/apps/examples/antdt-example-mlp-adam" --sample-log "$D/run/samples-\${SLURM_RESTART_COUNT:-0}" "\$@"
SH
chmod +x "$D/mlp.sh"
export ANTDT_PROGRAM="$D/mlp.sh" ANTDT_RUN_DIR="$D/run" ANTDT_RUN_NAME=mlp ANTDT_LOG_LEVEL=warn
# Every private Slurm numbers its first job 1, so Open MPI's shared-memory segments of job 1
# would be the same files as those of a test on another private Slurm at the same time.
mkdir -p "$D/shm"
export OMPI_MCA_btl_vader_backing_directory="$D/shm"
# 4 epochs of 2048 samples at B=64: 128 steps of 2 ranks x 32 samples x 9 ms = 0.29 s each
# (0.3 s with the step's overhead). The run must outlast the warning: at 6.5 ms a step, on an
# idle machine, it ended 28 s into the job, before the warning came. The rest after the stop
# (about 10 s) ends before the second run's warning.
args=(--samples $samples --epochs $epochs --global-batch 64 --virtual-device 0.009 --quiet)
id=$(sbatch --parsable -n 2 --time=0:40 --signal=B:USR1@15 -J mlp -o "$D/run/job-%j.out" "$script" "${args[@]}")
for _ in $(seq 1500); do  # up to 5 minutes
  state=$(scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2)
  case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 0.2
done
[ "$state" = COMPLETED ] || fail "the job ended as '$state'"
out="$D/run/job-$id.out"
grep -q "example-mlp-adam\|mlp.sh" "$out" || fail "the script did not run the example"
stops=$(grep -c "antdt: exit code 76" "$out" || true)
[ "$stops" -ge 1 ] || fail "the time limit never stopped the training (no exit code 76)"
grep -q "antdt: exit code 0" "$out" || fail "the last run did not finish"
runs=()
for r in $(seq 0 "$stops"); do runs+=("$D/run/samples-$r"); done
# Counted by test_faults.assert_exactly_once; each run stopped at a checkpoint of its last
# step, so its successor must begin right after it.
python3 - "$build" "$src" $samples $epochs "${runs[@]}" <<'PY' || fail "exactly-once check failed"
import os, sys, unittest
sys.path.insert(0, os.path.join(sys.argv[2], "tests", "apps"))
from test_faults import assert_exactly_once, read_log  # takes BUILD_DIR SOURCE_DIR from argv
n, epochs, runs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
logs = [read_log(r) for r in runs]
for i in range(len(logs) - 1):
    assert min(logs[i + 1]) == max(logs[i]) + 1, "run %d resumed at step %d, not after run %d's last step %d" % (
        i + 1, min(logs[i + 1]), i, max(logs[i]))
assert_exactly_once(unittest.TestCase(), runs, n=n, epochs=epochs)
print("requeue OK: %d runs, stopped after steps %s, every sample once in each of %d epochs" %
      (len(runs), [max(log) for log in logs[:-1]], epochs))
PY
echo "PASS"
