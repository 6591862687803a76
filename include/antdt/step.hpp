// The vocabulary of one training step, shared by the Session (the real job), the simulator and
// the reports: what a rank is given to do, what the whole step came to, and rank 0's record of
// it. docs/protocol.md shows who produces each of them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "antdt/plan.hpp"

namespace antdt {

// This rank's work for one step.
struct StepWork {
  std::int64_t step = 0;                    // 0-based global step
  std::int64_t epoch = 0;                   // lowest epoch not yet complete (informational)
  std::vector<std::int64_t> samples;        // sample indices, in order
  std::vector<std::int64_t> micro_batches;  // sizes of the accumulation micro-steps; sum == samples.size()
  std::int64_t plan_version = 0;
  // A pooled (non-dedicated) step: samples and micro_batches are empty; claim this rank's
  // micro-chunks with Session::next_chunk() until it returns none.
  bool pooled = false;
};

// What end_step learned about the whole step (identical on every rank).
//
// The totals (samples, loss_sum, correct, max_compute_seconds) are those of step totals_step.
// Rank 0 decides a step while the ranks compute the next one (the reply lag, docs/protocol.md),
// so usually totals_step = step - 1 (-1 at the first step: no totals yet); at a settled step
// (a checkpoint or stop request, the last step, a pooled step, or --reply-lag 0) it is step,
// and the totals of the step before it are not returned by any call (RunTotals and the records
// count every step).
struct StepSummary {
  std::int64_t step = 0;          // the step that ended
  std::int64_t totals_step = -1;  // the step whose totals follow (-1: none)
  std::int64_t samples = 0;       // B actually used across all ranks
  double loss_sum = 0.0;          // sum over ranks of what each passed to end_step
  std::int64_t correct = 0;
  double max_compute_seconds = 0.0;
  bool plan_changed = false;          // a new plan was issued (it applies at its effective_step)
  std::int64_t completed_epochs = 0;  // epochs completed so far
  double step_seconds = 0.0;          // wall time of this step on this rank
  // Some rank asked for a checkpoint after this step (Session::request_checkpoint): every rank
  // sees it at the same step, so a collective checkpoint can follow.
  bool checkpoint_requested = false;
  // No step follows this one (every step or epoch done, a stop, or a kill-restart), and why
  // (the same on every rank).
  bool finished = false;
  bool stopped = false;
  bool restart = false;
};

// Per completed epoch: samples committed, missing and duplicated (both must be 0).
struct EpochCoverageReport {
  std::int64_t epoch = 0, committed = 0, missing = 0, duplicated = 0;
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
