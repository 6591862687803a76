// The plan that sizes every rank's work: in force from a step on, reported in RunSummary::plans.
// The rules antdt applies to plans (PlanSchedule, the micro-batch split, the checks) are its own:
// src/core/plan_rules.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace antdt {

// Per-rank work for every step from effective_step on, until the next plan.
// Invariant (dedicated mode): sum(batch) == global_batch, batch[i] >= 1 unless excluded,
// accumulation[i] == ceil(batch[i] / micro_batch_cap[i]).
struct Plan {
  std::int64_t effective_step = 0;
  std::int64_t global_batch = 0;
  std::vector<std::int64_t> batch;            // b_i: samples per step on rank i
  std::vector<std::int64_t> micro_batch_cap;  // m_i: most samples one micro-step may hold
  std::vector<std::int32_t> accumulation;     // k_i: micro-steps per step
  std::string reason;                         // why the controller issued it
  std::int64_t version = 0;                   // increases by one with every new plan
  // Its steps are pooled (docs/nd.md): every rank claims micro-chunks of B until B are claimed,
  // and b_i is rank i's expected share. Only where the job has a pool (PoolOptions::pooled).
  bool pooled = false;
  // The ranks that sit out these steps (backup workers, docs/nd.md "Sitting out"), ascending:
  // each has b_i == 0 and takes no part in the steps' reductions or control rounds; the others
  // reduce on a communicator of their own. Never rank 0. Usually empty.
  std::vector<std::int32_t> sitting;

  [[nodiscard]] int world_size() const noexcept { return static_cast<int>(batch.size()); }
  // Sizes of rank i's micro-batches for a full share: split_micro_batches(b_i, m_i), k_i parts.
  [[nodiscard]] std::vector<std::int64_t> micro_batches(int rank) const;
  // The same rule for the n samples rank i actually holds (fewer than b_i at the end of the data).
  [[nodiscard]] std::vector<std::int64_t> micro_batches(int rank, std::int64_t n) const;
  // Whether rank i sits out these steps.
  [[nodiscard]] bool sits_out(int rank) const noexcept;
};

}  // namespace antdt
