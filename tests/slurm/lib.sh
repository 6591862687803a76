# What the Slurm tests that run antdt-train across nodes share (sourced by them).

# wait_job ID: waits until job ID has left the queue (up to 3 minutes); prints its final state.
wait_job() {
  local id=$1
  for _ in $(seq 900); do
    [ -z "$(squeue -h -j "$id" 2>/dev/null)" ] && break
    sleep 0.2
  done
  scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2
}

# wait_resubmitted ID OUTPUT: waits for job ID, which antdt-train.sbatch submitted (its output
# in OUTPUT); when Open MPI's TCP start-up failed in it, requeues it once. Prints its final state.
wait_resubmitted() {
  local state
  state=$(wait_job "$1")
  if [ "$state" != COMPLETED ] && tcp_startup_failed "$2" >&2; then
    scontrol requeue "$1" >&2 && state=$(sleep 1; wait_job "$1")
  fi
  echo "$state"
}

# tcp_startup_failed JOB_OUTPUT: whether Open MPI's TCP start-up failed in that job, and if so
# says so. srun places each node's ranks apart (remote to each other's, even on one machine), so
# they connect over TCP, and Open MPI 4.1.4's TCP BTL now and then reports "connect() to ...
# failed: Operation now in progress (115)" and a rank segfaults at start-up when the machine is
# loaded (seen beside the other tests). A test submits such a job once more, on Open MPI's own
# message only: a crash without it (antdt's own, at start-up) must fail the test, not be retried.
tcp_startup_failed() {
  grep -q "failed to TCP connect\|connect() to .* failed" "$1" || return 1
  echo "note: Open MPI's TCP start-up failed in $(basename "$1"); submitting again"
}
