// Private: when a waiting rank polls and when it naps (docs/errors.md, "Waits"). Pure: no MPI;
// the caller gives the clock and the thread's run delay, so tests script both.
//
// Polling answers a short wait fastest, and on a core of its own a rank loses nothing by it. On
// a core it shares (another job, a co-tenant, its own next compute in another thread) polling
// takes the core from work that needs it, and the scheduler then favours the other side when the
// rank has work to do. A rank cannot see its neighbours, but it can see what they do to it: while
// it polls, the kernel counts the time its thread was ready to run and not running (the run
// delay of /proc/thread-self/schedstat). So a wait polls for at most `spin` seconds, and naps
// from the moment that polling has been held back by more than kHeldShare of the wait plus
// kHeldSlack (a preemption by something that wanted the core, not the odd kernel thread); it then
// naps at once in every wait for the next kContendedHold seconds, and polls again to look once
// more. Where the kernel gives no run delay (0 always) nothing changes: polling for `spin`.
#pragma once

namespace antdt::detail {

class PollOrNap {
 public:
  static constexpr double kHeldShare = 0.1;     // of the wait so far
  static constexpr double kHeldSlack = 200e-6;  // seconds
  static constexpr double kContendedHold = 1.0;

  explicit PollOrNap(double spin_seconds) : spin_(spin_seconds) {}

  // A wait begins at `now`, with the thread's run delay so far.
  void begin(double now, double run_delay) noexcept {
    start_ = now;
    delay_at_start_ = run_delay;
  }
  // Whether the wait should nap now rather than poll (`run_delay`: the thread's, now). `capped`:
  // the rank's CPU quota binds (docs/controller.md): every wait naps.
  [[nodiscard]] bool nap(double now, double run_delay, bool capped) noexcept;
  // Whether the waits nap at once because polling was held back lately.
  [[nodiscard]] bool contended(double now) const noexcept { return now < contended_until_; }
  // Waits that found polling held back (each makes the next kContendedHold seconds nap).
  [[nodiscard]] long long contentions() const noexcept { return contentions_; }

 private:
  double spin_ = 0.0;
  double start_ = 0.0;
  double delay_at_start_ = 0.0;
  double contended_until_ = -1e300;
  long long contentions_ = 0;
};

// The calling thread's run delay from /proc/thread-self/schedstat (Linux), in seconds; 0 where
// the kernel does not give it. About a microsecond a call: the file stays open, per thread.
[[nodiscard]] double thread_run_delay_seconds();

}  // namespace antdt::detail
