// Rank 0's record of each step and its running totals over a run (not installed): what the
// Monitor, the Controller, the reports, the metrics and the timeline are fed from.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "antdt/plan.hpp"
#include "antdt/step.hpp"

namespace antdt {

// What one rank measured in one step. Compute is timed up to the moment the local gradients
// are ready, before any synchronisation (CUDA events on GPU), so a slow rank cannot hide
// behind the reduction.
struct RankStepStats {
  double compute_seconds = 0.0;    // local forward+backward (+ emulated stretch)
  double data_wait_seconds = 0.0;  // waiting for samples (reader, DDS)
  double reduce_seconds = 0.0;     // gradient reduction, including waiting for peers
  double idle_seconds = 0.0;       // max over ranks of compute minus own compute (filled at rank 0)
  std::int64_t samples = 0;        // samples actually used this step
  std::int32_t micro_steps = 0;    // accumulation micro-steps run
};

// Rank 0's record of one step, for reports, metrics and the timeline. Records are handed to
// the sinks of Session::add_record_sink as each step ends and are not kept.
struct StepRecord {
  std::int64_t step = 0;
  double start_seconds = 0.0;  // rank 0's clock, relative to session start
  double wall_seconds = 0.0;
  std::vector<RankStepStats> ranks;
  std::vector<std::int64_t> batch;  // plan in force
  std::int64_t plan_version = 0;
  double predicted_seconds = 0.0;  // cost model's prediction for this plan
  double loss_sum = 0.0;
};

// Rank 0's running totals over the steps of this run (since the session started or was
// restored): what the end-of-run summary needs, in memory that does not grow with the steps.
struct RunTotals {
  std::int64_t steps = 0;
  std::int64_t samples = 0;             // samples used in these steps, over all ranks
  double idle_fraction_sum = 0.0;       // sum over steps of 1 - mean_i compute_i / max_i compute_i
  double data_wait_fraction_sum = 0.0;  // sum over steps and ranks of data_wait_i / step wall time
  double reduce_fraction_sum = 0.0;     // the same for reduce_i
  double median_wall_seconds = 0.0;     // median step wall time (to 0.1 %, from a log histogram)
  double last_predicted_seconds = 0.0;  // the cost model's prediction for the last step's plan
  // Sum over steps of the step's ideal time: its samples at the sum of the speeds its ranks
  // measured in that step, samples_k / sum_i (b_ik / compute_ik). At most the step's slowest
  // compute, so at most the wall time of the steps: the efficiency ideal / wall cannot
  // exceed 1 (docs/controller.md, "Efficiency").
  double ideal_seconds = 0.0;
  // Median over steps of |predicted - measured| / measured, the cost model's prediction of
  // each step made before it ran against the Monitor's measured step time (0: none).
  double model_error_median = 0.0;
  std::int64_t model_error_steps = 0;  // steps with a prediction
};

// Called on rank 0 with each step's record and the plan in force, as the step ends (metrics
// and timeline files stream from here: report.hpp). Records are not kept.
using RecordSink = std::function<void(const StepRecord& record, const Plan& in_force)>;

}  // namespace antdt
