// Private: discrete-event simulator of a data-parallel job with virtual ranks. It runs the
// real Controller / Monitor / planner code on modelled step times: rank i's compute for b
// samples takes b * c / speed_i seconds (x transient slowdown, x seeded jitter), plus a fixed
// per-step overhead, then an alpha-beta allreduce; a step ends when the slowest rank is done.
// Used by antdt-sim, antdt-bench-controller and the controller tests. No MPI, no sleeping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "antdt/controller.hpp"
#include "antdt/emulation.hpp"

namespace antdt::sim {

struct SimConfig {
  std::vector<double> speeds;  // relative speed per rank (1 = x0 samples/s)
  std::int64_t steps = 500;
  double seconds_per_sample = 1e-3;  // c at speed 1
  double overhead_seconds = 0.0;     // fixed per-step time on every rank (reported as data wait)
  double jitter = 0.0;               // uniform multiplicative noise in [1 - j, 1 + j] per rank and step
  EmulationOptions emulation;        // transient_* and seed are used; speeds come from `speeds`
  ControllerOptions controller;      // policy, global batch, caps, thresholds, cost model
};

struct SimResult {
  std::string policy;
  std::int64_t steps = 0;
  std::int64_t samples = 0;
  double seconds = 0.0;           // simulated wall time
  double throughput = 0.0;        // samples / seconds
  double ideal_throughput = 0.0;  // sum_i speed_i / c (no transients, no overhead, no comm)
  double efficiency = 0.0;        // throughput / ideal_throughput
  double idle_fraction = 0.0;     // 1 - sum_steps mean_i t_i / sum_steps max_i t_i
  std::int64_t plan_changes = 0;
  std::int64_t last_change_effective_step = 0;  // 0 when the plan never changed
  double mean_prediction_error = 0.0;           // mean |predicted - simulated| / simulated step time
  double controller_seconds = 0.0;              // real wall time spent in Controller::on_step
  std::vector<Plan> plans;                      // the controller's history
};

// Throws UsageError on an empty speed list or bad options (as the Controller does).
[[nodiscard]] SimResult simulate(const SimConfig& config);

}  // namespace antdt::sim
