// The vocabulary of one training step, shared by the Session (the real job), the simulator and
// the reports: what a rank is given to do, what the whole step came to, and rank 0's record of
// it. docs/protocol.md shows who produces each of them.
#pragma once

#include <cstdint>
#include <vector>

#include "antdt/plan.hpp"

namespace antdt {

// This rank's work for one step.
struct StepWork {
  std::int64_t step = 0;                    // 0-based global step
  std::int64_t epoch = 0;                   // the epoch the step draws from (0-based; carried samples aside)
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
// and the totals of the step before it are not returned by any call (rank 0's running totals
// and step records count every step).
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

}  // namespace antdt
