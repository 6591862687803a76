#include "antdt/plan.hpp"

#include <algorithm>
#include <string>

#include "antdt/error.hpp"
#include "core/plan_rules.hpp"

namespace antdt {

std::vector<std::int64_t> split_micro_batches(std::int64_t n, std::int64_t cap) {
  if (cap < 1) throw UsageError("micro-batch cap must be >= 1, got " + std::to_string(cap));
  std::vector<std::int64_t> sizes;
  if (n <= 0) return sizes;
  const std::int64_t k = ceil_div(n, cap);
  sizes.reserve(static_cast<std::size_t>(k));
  for (std::int64_t j = 0; j < k; ++j) sizes.push_back(n / k + (j < n % k ? 1 : 0));
  return sizes;
}

std::vector<std::int64_t> Plan::micro_batches(int rank) const {
  return micro_batches(rank, batch.at(static_cast<std::size_t>(rank)));
}

std::vector<std::int64_t> Plan::micro_batches(int rank, std::int64_t n) const {
  return split_micro_batches(n, micro_batch_cap.at(static_cast<std::size_t>(rank)));
}

bool Plan::sits_out(int rank) const noexcept {
  return std::binary_search(sitting.begin(), sitting.end(), static_cast<std::int32_t>(rank));
}

std::string pool_chunking_problem(const PoolOptions& pool) {
  if (pool.chunks_per_share < 1) return "chunks per share must be at least 1";
  if (!(pool.first_chunk >= 0.0 && pool.first_chunk < 1.0))
    return "the first chunk must be a part of the share in [0, 1)";
  return {};
}

std::string backup_workers_problem(int backup_workers, int world) {
  if (world >= 1 && backup_workers >= 0 && backup_workers < world) return {};
  return "backup workers: " + std::to_string(backup_workers) + " of " + std::to_string(world) +
         " ranks; a step needs at least one rank that is not a backup";
}

void PlanSchedule::reset(std::shared_ptr<const Plan> current, std::shared_ptr<const Plan> pending) {
  current_ = std::move(current);
  pending_ = std::move(pending);
}

bool PlanSchedule::advance_to(std::int64_t step) {
  if (!pending_ || pending_->effective_step > step) return false;
  current_ = std::move(pending_);
  pending_.reset();
  return true;
}

const Plan& PlanSchedule::at(std::int64_t step) const {
  return pending_ && pending_->effective_step <= step ? *pending_ : *current_;
}

void update_accumulation(Plan& plan) {
  plan.accumulation.resize(plan.batch.size());
  for (std::size_t i = 0; i < plan.batch.size(); ++i) {
    const std::int64_t cap = plan.micro_batch_cap.at(i);
    if (cap < 1) throw UsageError("micro-batch cap of rank " + std::to_string(i) + " must be at least 1");
    plan.accumulation[i] = static_cast<std::int32_t>(plan.batch[i] == 0 ? 0 : ceil_div(plan.batch[i], cap));
  }
}

// Sums cannot overflow: each b_i <= B, and the loop stops once the sum passes B.
std::string plan_problem(const Plan& p) {
  if (p.batch.empty()) return "it has no ranks";
  if (p.micro_batch_cap.size() != p.batch.size() || p.accumulation.size() != p.batch.size()) {
    return "batch, cap and accumulation lengths differ";
  }
  if (p.global_batch < 1) return "global batch " + std::to_string(p.global_batch) + " < 1";
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < p.batch.size(); ++i) {
    const std::int64_t b = p.batch[i];
    const std::int64_t cap = p.micro_batch_cap[i];
    const std::string rank = "rank " + std::to_string(i) + ": ";
    if (b < 0 || b > p.global_batch) return rank + "batch " + std::to_string(b) + " outside [0, global batch]";
    if (cap < 1) return rank + "micro-batch cap " + std::to_string(cap) + " < 1";
    if (p.accumulation[i] != b / cap + (b % cap != 0 ? 1 : 0))
      return rank + "accumulation " + std::to_string(p.accumulation[i]) + " != ceil(batch / cap)";
    sum += b;
    if (sum > p.global_batch) break;
  }
  if (sum != p.global_batch) return "batches do not sum to the global batch " + std::to_string(p.global_batch);
  return sitting_problem(p);
}

std::string sitting_problem(const Plan& p) {
  for (std::size_t k = 0; k < p.sitting.size(); ++k) {
    const std::int32_t r = p.sitting[k];
    if (r < 1 || r >= p.world_size() || (k > 0 && r <= p.sitting[k - 1]))
      return "its sitting ranks are not ascending ranks in [1, world)";
    if (p.batch[static_cast<std::size_t>(r)] != 0) return "rank " + std::to_string(r) + " sits out but has samples";
  }
  return "";
}

Plan equal_plan(std::int64_t global_batch, const std::vector<std::int64_t>& caps, std::int64_t effective_step) {
  const auto n = static_cast<std::int64_t>(caps.size());
  if (n == 0) throw UsageError("a plan needs at least one rank");
  if (global_batch < 1) throw UsageError("the global batch must be at least 1");
  Plan p;
  p.effective_step = effective_step;
  p.global_batch = global_batch;
  p.micro_batch_cap = caps;
  p.batch.resize(caps.size());
  for (std::int64_t i = 0; i < n; ++i)
    p.batch[static_cast<std::size_t>(i)] = global_batch / n + (i < global_batch % n ? 1 : 0);
  update_accumulation(p);
  p.reason = "equal split";
  return p;
}

}  // namespace antdt
