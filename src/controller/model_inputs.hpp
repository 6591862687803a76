// Private: the cost model's per-rank inputs, read from the Monitor (docs/controller.md, "Cost
// model"): rank i takes a_i + b_i / x_i seconds, where x_i is the marginal throughput of its
// fitted compute model and a_i its median data wait plus the model's fixed part. The
// Controller's predictions and the dd policy's decisions both read them here.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "antdt/plan.hpp"
#include "monitor/monitor.hpp"

namespace antdt::detail {

struct RankModel {
  double throughput = 0.0;  // x_i, samples/s; 0 without timing
  double fixed = 0.0;       // a_i, seconds
};

// The dd policy's guard against long transients (docs/controller.md): a rank whose window
// median was dragged down by a slowdown but which is fast again plans at its recent speed.
// "Fast again" is a best step of the last few at kJump x its window median (far beyond noise:
// a transient ended), or their median at kRecovered x (most of them are fast).
constexpr double kJump = 1.5;
constexpr double kRecovered = 1.2;

// Rank i's model; recent_steps > 0 applies the guard over the last recent_steps steps. The
// fixed part of the compute model stays phi / x_i, the same model at the higher speed.
inline RankModel rank_model(const Monitor& m, int rank, int recent_steps = 0) {
  const RankComputeModel c = m.compute_model(rank);
  RankModel r;
  r.throughput = c.throughput;
  // The median can only clear its bar if the best of those steps does (a few loads, no sort:
  // this runs for every rank at every step).
  if (recent_steps > 0) {
    const double peak = m.model_recent_peak(rank, recent_steps);
    if (peak > kJump * c.throughput) {
      r.throughput = peak;
    } else if (peak > kRecovered * c.throughput) {
      if (const double recent = m.model_recent_median(rank, recent_steps); recent > kRecovered * c.throughput)
        r.throughput = recent;
    }
  }
  r.fixed = m.data_wait_seconds(rank) + (r.throughput > 0.0 ? c.intercept_samples / r.throughput : 0.0);
  return r;
}

// The measured all-reduce once there is one, else -1 (the cost model's alpha-beta term).
inline double measured_allreduce(const Monitor& m) {
  return m.steps_recorded() > 0 && m.entries() > 0 ? m.allreduce_seconds() : -1.0;
}

}  // namespace antdt::detail
