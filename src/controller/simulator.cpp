#include "controller/simulator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "agent/counter_rng.hpp"
#include "antdt/error.hpp"

namespace antdt::sim {

namespace {
constexpr std::uint64_t kJitterStream = 0x6a6974746572ULL;  // "jitter"
}

SimResult simulate(const SimConfig& config) {
  const auto n = config.speeds.size();
  if (n == 0) throw UsageError("simulator: no ranks (empty speed list)");
  if (!(config.seconds_per_sample > 0.0)) throw UsageError("simulator: seconds per sample must be > 0");
  if (config.steps < 1) throw UsageError("simulator: steps must be at least 1");
  if (config.jitter < 0.0 || config.jitter >= 1.0) throw UsageError("simulator: jitter must be in [0, 1)");

  EmulationOptions emulation = config.emulation;
  emulation.speeds = config.speeds;
  emulation.virtual_seconds_per_sample = config.seconds_per_sample;
  std::vector<SpeedEmulator> ranks;
  ranks.reserve(n);
  for (std::size_t i = 0; i < n; ++i) ranks.emplace_back(emulation, static_cast<int>(i), static_cast<int>(n));

  ControllerOptions options = config.controller;
  if (options.caps.empty()) options.caps = {options.global_batch};
  Controller controller(
      options, equal_plan(options.global_batch,
                          options.caps.size() == 1 ? std::vector<std::int64_t>(n, options.caps[0]) : options.caps));
  const CostModel& cost = controller.cost_model();

  SimResult result;
  result.policy = controller.policy_name();
  double sum_mean_t = 0.0;
  double sum_max_t = 0.0;
  double error_sum = 0.0;
  std::int64_t error_count = 0;
  std::vector<RankStepStats> stats(n);
  std::vector<double> t(n);
  for (std::int64_t step = 0; step < config.steps; ++step) {
    const Plan& plan = controller.plan_at(step);
    // What the cost model expects for this step, from what the Monitor has seen so far.
    const Monitor& monitor = controller.monitor();
    double predicted = 0.0;
    if (monitor.median_throughput() > 0.0) {
      std::vector<double> x = monitor.throughputs();
      for (auto& v : x) {
        if (!(v > 0.0)) v = monitor.median_throughput();
      }
      predicted = cost.predict_step_seconds(plan, x, monitor.data_wait_seconds());
    }
    double max_t = 0.0;
    double max_compute = 0.0;
    double sum_t = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t b = plan.batch[i];
      const double u = detail::counter_uniform(emulation.seed, kJitterStream, i, static_cast<std::uint64_t>(step));
      const double noise = 1.0 + config.jitter * (2.0 * u - 1.0);
      const double compute = b > 0 ? ranks[i].target_compute_seconds(0.0, b, step) * noise : 0.0;
      stats[i] = RankStepStats{};
      stats[i].compute_seconds = compute;
      stats[i].data_wait_seconds = config.overhead_seconds;
      stats[i].samples = b;
      stats[i].micro_steps = plan.accumulation[i];
      t[i] = config.overhead_seconds + compute;
      max_t = std::max(max_t, t[i]);
      max_compute = std::max(max_compute, compute);
      sum_t += t[i];
    }
    const double comm = cost.allreduce_seconds(static_cast<int>(n));
    for (std::size_t i = 0; i < n; ++i) {
      stats[i].reduce_seconds = (max_t - t[i]) + comm;
      stats[i].idle_seconds = max_compute - stats[i].compute_seconds;
    }
    const double step_seconds = max_t + comm;
    if (predicted > 0.0) {
      error_sum += std::abs(predicted - step_seconds) / step_seconds;
      ++error_count;
    }
    result.seconds += step_seconds;
    result.samples += plan.global_batch;
    sum_mean_t += sum_t / static_cast<double>(n);
    sum_max_t += max_t;

    const auto begin = std::chrono::steady_clock::now();
    const auto changed = controller.on_step(step, stats);
    result.controller_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (changed) {
      ++result.plan_changes;
      result.last_change_effective_step = changed->effective_step;
    }
  }
  result.steps = config.steps;
  result.throughput = result.seconds > 0.0 ? static_cast<double>(result.samples) / result.seconds : 0.0;
  for (const auto& r : ranks) result.ideal_throughput += r.virtual_throughput();
  result.efficiency = result.ideal_throughput > 0.0 ? result.throughput / result.ideal_throughput : 0.0;
  result.idle_fraction = sum_max_t > 0.0 ? 1.0 - sum_mean_t / sum_max_t : 0.0;
  result.mean_prediction_error = error_count > 0 ? error_sum / static_cast<double>(error_count) : 0.0;
  result.plans = controller.history();
  return result;
}

}  // namespace antdt::sim
