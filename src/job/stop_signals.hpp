// Private: a job's stop signals (docs/errors.md, "Stopping a run"). The first of them
// (default SIGTERM, SIGINT, SIGUSR1: a time limit, preemption, Ctrl-C) asks the run to stop
// after the step under way; rank 0 checkpoints it and every rank exits with kExitStopped. The
// handler resets itself, so a second signal has its default effect and a job that will not
// stop can still be ended.
#pragma once

#include <csignal>
#include <string>
#include <vector>

namespace antdt::detail {

// "TERM,INT,USR1" (names with or without SIG, or numbers), or "none". UsageError otherwise.
[[nodiscard]] std::vector<int> parse_stop_signals(const std::string& spec);

// Handles `signals` for the life of this object (the previous handlers come back after it).
class StopSignals {
 public:
  explicit StopSignals(const std::vector<int>& signals);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Whether this process's launcher (its parent when the object was made: mpirun's daemon,
  // srun's step daemon) is gone, as after a second Ctrl-C ends mpirun at once: then no rank
  // should train on. A getppid() call (the kernel re-parents an orphan), cheap enough for every
  // step; a PR_SET_PDEATHSIG would also fire when the launcher's forking thread ends.
  [[nodiscard]] bool launcher_gone() const noexcept;

 private:
  std::vector<std::pair<int, struct sigaction>> previous_;
  int parent_ = 0;
};

// The first stop signal this process received; 0: none.
[[nodiscard]] int stop_signal() noexcept;
// "SIGTERM"
[[nodiscard]] std::string signal_name(int signal);

}  // namespace antdt::detail
