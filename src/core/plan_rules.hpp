// antdt's own rules for plans, shared by the Monitor, the Controller, the Agent and the Session
// (not installed): the schedule that switches plans at their effective step, pooled steps'
// options, the micro-batch split and the checks of plans read from outside.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "antdt/options.hpp"
#include "antdt/plan.hpp"

namespace antdt {

// Ceil division for non-negative counts.
[[nodiscard]] constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept { return (a + b - 1) / b; }

// Non-dedicated (pooled) steps, docs/nd.md: every rank claims micro-chunks of the step's
// global batch from a pool until B are claimed. The plan's b_i is then rank i's expected share:
// it sizes its chunks, and under a deadline it is the rank's own slice, all it may train.
//
// How a rank learns that B is done (docs/nd.md):
//  - counter: every chunk is claimed from one counter on rank 0 (MPI one-sided atomics), so a
//    step does exactly B samples whoever did them. Open MPI 4.1 has reliable atomics only
//    within a node, so this is what a job on one node uses;
//  - deadline: rank 0 predicts from the Monitor how long B samples take at the ranks' usual
//    speeds and sends that compute-time deadline with the reply; each rank computes chunks of
//    its provisioned share until the deadline. A rank slowed this step contributes what it
//    finished by then (the step does fewer than B, the update stays exact); what it did not
//    reach is carried to the front of the next step's batch. No communication during the step:
//    what a job across nodes uses.

struct PoolOptions {
  bool pooled = false;       // the job may pool steps (nd, auto): its pool exists; Plan::pooled says which do
  int backup_workers = 0;    // b: checked only; any rank may claim any part of a step's batch
  int chunks_per_share = 8;  // a rank's chunk is about b_i / this (at most m_i)
  double first_chunk = 0.0;  // a rank's first chunk of a step is at least this part of b_i (0: none), in [0, 1)
  PoolMechanism mechanism = PoolMechanism::automatic;  // automatic: counter on one node, else deadline
};

// Why the chunk sizing of `pool` cannot be used (chunks_per_share below 1, first_chunk outside
// [0, 1)), or "" when it can. The one check of these fields, for the Session and the Agent.
[[nodiscard]] std::string pool_chunking_problem(const PoolOptions& pool);

// Why `backup_workers` cannot be used on `world` ranks (not in [0, world)), or "" when it can.
// With steps composed from the data order any rank may claim any part of a step's batch, so the
// count limits nothing (docs/nd.md); it is still checked.
[[nodiscard]] std::string backup_workers_problem(int backup_workers, int world);

// THE micro-batch rule, used by the plan, the Session and accumulate_micro_batches: n samples
// in ceil(n / cap) near-equal parts, the first n % k one larger. Empty for n <= 0; UsageError
// for cap < 1.
[[nodiscard]] std::vector<std::int64_t> split_micro_batches(std::int64_t n, std::int64_t cap);

// The plan in force and the one issued but not yet in force, and THE rule that switches
// between them: a plan is in force from its effective_step on. Every rank's Agent and rank 0's
// Controller keep one. Plans are shared, not copied: the simulator's thousands of Agents hold
// the same one.
class PlanSchedule {
 public:
  PlanSchedule() = default;
  explicit PlanSchedule(std::shared_ptr<const Plan> current) : current_(std::move(current)) {}

  // Replaces the plan in force (start, restore, probe); drops any pending one.
  void reset(std::shared_ptr<const Plan> current, std::shared_ptr<const Plan> pending = nullptr);
  // A newly issued plan; it replaces an earlier pending one.
  void issue(std::shared_ptr<const Plan> next) { pending_ = std::move(next); }
  // Puts the pending plan in force if it is due by `step`; true if it did.
  bool advance_to(std::int64_t step);
  // The plan that will be in force at `step` (>= every step advanced to), without advancing.
  [[nodiscard]] const Plan& at(std::int64_t step) const;

  [[nodiscard]] const Plan& current() const noexcept { return *current_; }
  [[nodiscard]] const std::shared_ptr<const Plan>& current_ptr() const noexcept { return current_; }
  [[nodiscard]] const std::shared_ptr<const Plan>& pending() const noexcept { return pending_; }
  [[nodiscard]] bool has_plan() const noexcept { return current_ != nullptr; }

 private:
  std::shared_ptr<const Plan> current_;
  std::shared_ptr<const Plan> pending_;
};

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
// Why the plan's sitting ranks break its invariant (not ascending ranks in [1, world), or one
// with samples), or "" when they hold; plan_problem includes it.
[[nodiscard]] std::string sitting_problem(const Plan& plan);

}  // namespace antdt
