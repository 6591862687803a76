#include "transport/stall_watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "transport/guard.hpp"

namespace antdt::detail {

StallWatchdog::StallWatchdog(double seconds, int rank) : seconds_(seconds), rank_(rank), thread_([this] { watch(); }) {}

StallWatchdog::~StallWatchdog() {
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void StallWatchdog::arm(std::int64_t step) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    armed_ = true;
    step_ = step;
    deadline_ = steady_seconds() + seconds_;
    // A thread already waiting for an earlier deadline needs no wake: at that deadline it finds
    // this later one and waits again. Waking it every step cost dd 0.8 % at 8 ranks on 2 cores.
    wake = idle_;
  }
  if (wake) wake_.notify_one();
}

void StallWatchdog::disarm() {
  std::lock_guard lock(mutex_);
  armed_ = false;
}

std::uint64_t StallWatchdog::wakeups() const {
  std::lock_guard lock(mutex_);
  return wakeups_;
}

void StallWatchdog::watch() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (quit_) return;
    if (!armed_) {
      idle_ = true;
      wake_.wait(lock);
      idle_ = false;
      ++wakeups_;
      continue;
    }
    const double left = deadline_ - steady_seconds();
    if (left > 0) {
      wake_.wait_for(lock, std::chrono::duration<double>(left));
      ++wakeups_;
      continue;
    }
    // Formatted before, written with one write(2): nothing here may take a lock MPI holds.
    char line[256];
    const int n = std::snprintf(line, sizeof line,
                                "antdt: rank %d: the gradient reduction of step %lld has not ended %.0f s after it "
                                "began (a rank stalled inside it; step timeout); ending this process\n",
                                rank_, static_cast<long long>(step_), seconds_);
    if (n > 0) (void)!::write(STDERR_FILENO, line, static_cast<std::size_t>(std::min<int>(n, sizeof line - 1)));
    std::_Exit(kStallExitCode);
  }
}

}  // namespace antdt::detail
