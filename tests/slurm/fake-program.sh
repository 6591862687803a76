#!/usr/bin/env bash
# A stand-in for a program built on antdt, so that each branch of scripts/slurm/antdt.sbatch
# can be tested in seconds. Run as the script runs a program (one task per node, any number):
# it takes the run options (--checkpoint-dir DIR, --summary-json FILE, ...), logs each start to
# DIR/fake-starts ("JOB.RESTART PROCID NODE"), writes {"job":..,"restart":..,"run":N} to the
# summary, and then does the Nth word of FAKE_PLAN on the run's Nth start (counted over the
# jobs and requeues of one checkpoint directory; the last word repeats):
#   CODE        exit with CODE (0 done, 75 kill-restart, 5 stall, ...)
#   CODE@last   the last task first writes its node to DIR/antdt-restart-exclude, as antdt does
#               for a slow (75) or a stalled (5) node
#   nosummary   exit 0 without writing the summary, as a program that never ran
#   killed75    write DIR/antdt-restart-pending (now), as antdt's rank 0 does at a kill-restart
#               exit, then exit 143, as srun reports a rank it ended while it was finishing
#   wait        wait for SIGTERM or SIGUSR1, then exit 76, as antdt stops with a checkpoint (a
#               line in DIR/fake-waiting says the signals are caught)
set -uo pipefail
ckpt='' summary=''
while [ $# -gt 0 ]; do
  case $1 in
    --checkpoint-dir) ckpt=$2; shift ;;
    --summary-json) summary=$2; shift ;;
  esac
  shift
done
[ -n "$ckpt" ] || { echo "fake-program: no --checkpoint-dir" >&2; exit 2; }
key="${SLURM_JOB_ID:-0}.${SLURM_RESTART_COUNT:-0}"
node=${SLURMD_NODENAME:-$(hostname)}
task=${SLURM_PROCID:-0} tasks=${SLURM_NTASKS:-1}
run=$(
  {
    flock 9
    echo "$key $task $node" >> "$ckpt/fake-starts"
    awk '{print $1}' "$ckpt/fake-starts" | awk '!seen[$0]++' | grep -nFx "$key" | cut -d: -f1
  } 9>"$ckpt/fake-starts.lock"
)
run=$((run - 1))
read -ra plan <<<"${FAKE_PLAN//,/ }"
[ "$run" -lt "${#plan[@]}" ] || run=$((${#plan[@]} - 1))
word=${plan[$run]}
if [ "$task" = 0 ] && [ -n "$summary" ] && [ "$word" != nosummary ]; then
  printf '{"job": "%s", "restart": %s, "run": %s, "word": "%s"}\n' "${SLURM_JOB_ID:-0}" "${SLURM_RESTART_COUNT:-0}" \
    "$run" "$word" > "$summary"
fi
echo "fake-program: task $task on $node, run $run of the checkpoint directory: $word"
case $word in
  wait)
    stop() { echo "fake-program: task $task got $1: stopping with a checkpoint (76)"; exit 76; }
    trap 'stop SIGTERM' TERM
    trap 'stop SIGUSR1' USR1
    echo "$key $task" >> "$ckpt/fake-waiting"  # signals are caught from here on
    # Wait in a builtin, with no child: scancel --signal signals every process of the step, and
    # a child `sleep` killed first let `wait` return before the shell's own trap ran (exit 1).
    exec 9<> <(:)
    for _ in $(seq 300); do read -r -t 1 -u 9 && break; done
    exit 1  # no signal within 5 minutes
    ;;
  0 | nosummary) exit 0 ;;
  killed75)
    date +%s.%N > "$ckpt/antdt-restart-pending"
    exit 143
    ;;
  *)
    # Every task ends with the code, as antdt's ranks do: task 0 first, once the last task has
    # named its node; srun then stops the others (--kill-on-bad-exit), which end with it too.
    code=${word%@last}
    trap 'exit "$code"' TERM
    [ "$word" != "$code" ] && [ "$task" = $((tasks - 1)) ] && echo "$node" >> "$ckpt/antdt-restart-exclude"
    if [ "$task" = 0 ]; then sleep 0.5; else sleep 5 & wait $!; fi
    exit "$code"
    ;;
esac
