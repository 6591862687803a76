// The vocabulary shared by the Monitor, the Controller, the Agent and the Session:
// what one rank did in one step, and the plan that sizes every rank's work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

  [[nodiscard]] int world_size() const noexcept { return static_cast<int>(batch.size()); }
  // Sizes of rank i's micro-batches this step: k_i near-equal parts that sum to b_i.
  [[nodiscard]] std::vector<std::int64_t> micro_batches(int rank) const;
};

// Ceil division for non-negative counts.
[[nodiscard]] constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept { return (a + b - 1) / b; }

// A plan with equal shares (the first `global_batch % world` ranks get one more), every
// rank capped at `cap` samples per micro-step.
[[nodiscard]] Plan equal_plan(std::int64_t global_batch, const std::vector<std::int64_t>& caps,
                              std::int64_t effective_step = 0);

// Fills accumulation from batch and micro_batch_cap.
void update_accumulation(Plan& plan);

// Why `plan` breaks the Plan invariant, or "" when it holds: at least one rank, one b_i, m_i
// and k_i per rank, global batch B >= 1, each b_i in [0, B] summing to B, m_i >= 1 and
// k_i == ceil(b_i / m_i). For plans read from outside (checkpoints, control messages).
[[nodiscard]] std::string plan_problem(const Plan& plan);

}  // namespace antdt
