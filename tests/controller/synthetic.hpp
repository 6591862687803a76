// Synthetic step histories for the controller tests: every rank i computes b_i samples at
// x_i(step) samples/s, so samples / compute_seconds is exactly x_i(step).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "antdt/plan.hpp"
#include "core/step_record.hpp"

namespace antdt::testing_support {

using SpeedAt = std::function<double(int rank, std::int64_t step)>;

inline std::vector<RankStepStats> step_stats(const Plan& plan, const SpeedAt& x, std::int64_t step) {
  std::vector<RankStepStats> stats(plan.batch.size());
  double slowest = 0.0;
  for (std::size_t i = 0; i < stats.size(); ++i) {
    stats[i].samples = plan.batch[i];
    stats[i].micro_steps = plan.accumulation[i];
    stats[i].compute_seconds =
        plan.batch[i] > 0 ? static_cast<double>(plan.batch[i]) / x(static_cast<int>(i), step) : 0.0;
    slowest = std::max(slowest, stats[i].compute_seconds);
  }
  for (std::size_t i = 0; i < stats.size(); ++i) {
    auto& s = stats[i];
    if (plan.sits_out(static_cast<int>(i))) continue;  // a rank that sits out reports nothing
    s.idle_seconds = slowest - s.compute_seconds;
    s.reduce_seconds = s.idle_seconds + 1e-4;
  }
  return stats;
}

}  // namespace antdt::testing_support
