// Private: the straggler emulation of one rank (the options are antdt/emulation.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "antdt/emulation.hpp"

namespace antdt {

// One per rank (the Agent's). Cheap (it keeps only this rank's parameters, so the simulator's
// thousands of Agents stay small), const after construction, no clock or global state.
class SpeedEmulator {
 public:
  // UsageError when speeds has neither 0, 1 nor world_size entries, or rank is out of range.
  // `node` is this rank's node name, for the schedule entries that name a node.
  SpeedEmulator(const EmulationOptions& options, int rank, int world_size, const std::string& node = {});

  // What `samples` samples of compute at `step` should take, given that they took `measured`
  // seconds for real: never less than measured. Without emulation returns measured.
  [[nodiscard]] double target_compute_seconds(double measured, std::int64_t samples, std::int64_t step) const;
  // Transient multiplier at `step`: transient_factor while a slowdown is active, else 1.
  [[nodiscard]] double slowdown(std::int64_t step) const;
  // Virtual device: the jitter multiplier of `step`, in [1 - jitter, 1 + jitter]; 1 without.
  [[nodiscard]] double noise(std::int64_t step) const;
  [[nodiscard]] bool emulated() const noexcept { return emulated_; }
  [[nodiscard]] double speed() const noexcept { return speed_; }  // before any scheduled change
  // The speed at `step` after the schedule's changes (step < 0: the starting speed).
  [[nodiscard]] double speed_at(std::int64_t step) const;
  // Virtual-device mode: the standalone throughput speed / c (samples/s), without
  // transients; 0 in stretch mode (then it depends on the real hardware).
  [[nodiscard]] double virtual_throughput() const noexcept;
  // The same at `step`, scheduled speed changes included.
  [[nodiscard]] double virtual_throughput(std::int64_t step) const;

 private:
  int rank_;
  double speed_ = 1.0;
  double transient_probability_ = 0.0;
  double transient_factor_ = 1.0;
  std::int64_t transient_steps_ = 0;
  std::int64_t transient_from_ = 0;  // slowdowns start at steps in [from, until); until 0: no end
  std::int64_t transient_until_ = 0;
  double seconds_per_sample_ = 0.0;
  double jitter_ = 0.0;
  std::vector<std::pair<std::int64_t, double>> changes_;  // this rank's (step, speed), by step
  std::uint64_t seed_ = 0;
  bool emulated_ = false;
};

// Blocks the calling thread for `seconds` (<= 0: returns at once) by sleeping until a
// steady-clock deadline, re-sleeping after early wake-ups. The first call sets the calling
// thread's timer slack to 1 ns (Linux lets a sleeper wake up to its slack late, 50 us by
// default), so it wakes tens of microseconds late instead of about 100
// (`antdt-bench-session --mode wait`); the thread's later sleeps, and threads it creates, keep it.
void wait_for(double seconds);

}  // namespace antdt
