#include "session/session_setup.hpp"

#include <algorithm>
#include <string>

#include "antdt/error.hpp"
#include "comm/sample_count.hpp"
#include "controller/controller.hpp"
#include "controller/planner.hpp"
#include "core/option_names.hpp"
#include "core/plan_rules.hpp"

namespace antdt::detail {

void validate_session_options(const SessionOptions& o, int world, bool dataset_known) {
  const auto name = [](const char* key) { return option_name(key); };
  if (dataset_known && o.dataset_size < 1) throw UsageError("the data set is empty: it needs at least 1 sample");
  if (o.global_batch < 1) throw UsageError(name("global-batch") + " must be at least 1");
  // The reduced sample count is exact at any B on up to kExactCountMaxRanks ranks, and at any
  // world size while B <= 2^24 (src/comm/sample_count.hpp).
  if (world > kExactCountMaxRanks && o.global_batch > (std::int64_t{1} << 24)) {
    throw UsageError("on more than " + std::to_string(kExactCountMaxRanks) +
                     " ranks the reduced sample count is exact only up to 2^24 = 16777216 samples per step, but " +
                     name("global-batch") + " is " + std::to_string(o.global_batch));
  }
  if (o.micro_batch_cap < 0) throw UsageError(name("micro-batch-cap") + " must be >= 0 (0 = no cap)");
  if (o.reply_lag < 0 || o.reply_lag > 1) throw UsageError(name("reply-lag") + " must be 0 or 1");
  if (!(o.step_timeout_seconds >= 0.0) || o.step_timeout_seconds > 1e9)
    throw UsageError(name("step-timeout") + " must be 0 (none) or positive seconds");
  if (!(o.wait_spin_seconds >= 0.0) || o.wait_spin_seconds > 1.0)
    throw UsageError(name("wait-spin") + " must be between 0 and 1 seconds");
  if (o.max_epochs < 0 || o.max_steps < 0) throw UsageError(name("epochs") + " and " + name("steps") + " must be >= 0");
  if (o.max_epochs == 0 && o.max_steps == 0) {
    throw UsageError("give " + name("steps") + " or " + name("epochs") + " (or both): with neither the run never ends");
  }
  if (!o.emulation.speeds.empty() && o.emulation.speeds.size() != 1 &&
      o.emulation.speeds.size() != static_cast<std::size_t>(world)) {
    throw UsageError(name("emulate-speed") + " has " + std::to_string(o.emulation.speeds.size()) +
                     " values but the job has " + std::to_string(world) + " ranks (give one per rank, or one for all)");
  }
  for (const auto& c : o.emulation.schedule) {
    if (c.rank >= world) {
      throw UsageError(name("emulate-schedule") + ": rank " + std::to_string(c.rank) + " is not a rank of this " +
                       std::to_string(world) + "-rank job");
    }
  }
  (void)make_policy(o.controller.policy);  // UsageError naming the known ones
  (void)pool_options(o, world);
  if (!o.fixed_split.empty()) (void)first_plan(o, std::vector<std::int64_t>(static_cast<std::size_t>(world), 1), {});
}

dds::LedgerOptions session_ledger_options(const SessionOptions& o, int world) {
  validate_session_options(o, world);
  dds::LedgerOptions l;
  l.dataset_size = o.dataset_size;
  // From N, B and the shuffle alone: the order, and so every step's samples, must not depend on
  // the world. 0: one shard (a full permutation per epoch), or shards of 10 B where the samples
  // are not shuffled within shards (docs/dds.md).
  l.shard_size =
      o.shard_size > 0 ? o.shard_size : dds::default_shard_size(o.dataset_size, o.global_batch, o.shuffle_within_shard);
  l.seed = o.seed;
  l.shuffle_shards = o.shuffle_shards;
  l.shuffle_within_shard = o.shuffle_within_shard;
  l.max_epochs = o.max_epochs;
  return l;
}

PoolOptions pool_options(const SessionOptions& o, int world) {
  PoolOptions p;
  p.pooled = policy_pools(o.controller.policy);
  const int backups = o.backup_workers < 0 ? std::min(1, world - 1) : o.backup_workers;
  p.backup_workers = p.pooled ? backups : 0;
  p.chunks_per_share = o.chunks_per_share;
  p.first_chunk = o.first_chunk;
  p.mechanism = o.pool_mechanism;
  if (p.pooled && backups >= world) {
    throw UsageError(option_name("backup-workers") + " " + std::to_string(backups) +
                     " leaves no rank to do a step of this " + std::to_string(world) + "-rank job (give 0 to " +
                     std::to_string(world - 1) + ")");
  }
  if (const std::string why = pool_chunking_problem(p); !why.empty())
    throw UsageError(option_name("nd-chunks") + ", " + option_name("nd-first-chunk") + ": " + why);
  return p;
}

protocol::StepCoordinatorOptions coordinator_options(const SessionOptions& o, const std::vector<std::int64_t>& caps,
                                                     const std::vector<std::string>& nodes) {
  protocol::StepCoordinatorOptions c;
  c.max_steps = o.max_steps;
  c.max_epochs = o.max_epochs;
  c.dataset_size = o.dataset_size;
  c.data_seed = o.seed;
  c.emulation_seed = o.emulation.seed;
  c.controller = o.controller;
  c.pipelined = o.reply_lag > 0;
  c.controller.plan_lag = std::max<std::int64_t>(c.controller.plan_lag, o.reply_lag);
  c.controller.global_batch = o.global_batch;
  c.controller.caps = caps;
  c.controller.world_size = static_cast<int>(caps.size());
  c.controller.cost.gradient_bytes = o.gradient_bytes;
  c.controller.nodes = nodes;
  c.pool = pool_options(o, static_cast<int>(caps.size()));
  // Backup workers sit out only where the program can hand its state to a rank that rejoins (a
  // Job), and on at least two ranks: `backup_workers` ranks at most, 1 unless set.
  const int world = static_cast<int>(caps.size());
  const int backups = o.backup_workers < 0 ? std::min(1, world - 1) : o.backup_workers;
  if (backups >= world && world > 0) {
    throw UsageError(option_name("backup-workers") + " " + std::to_string(backups) +
                     " leaves no rank to do a step of this " + std::to_string(world) + "-rank job (give 0 to " +
                     std::to_string(world - 1) + ")");
  }
  c.controller.backup_workers = o.can_sit_out ? backups : 0;
  return c;
}

Plan first_plan(const SessionOptions& o, const std::vector<std::int64_t>& caps, const std::vector<double>& priors) {
  if (!o.fixed_split.empty()) {
    if (policy_rebalances(o.controller.policy))
      throw UsageError(option_name("fixed-split") + " is for " + option_name("policy") + " static, not " +
                       o.controller.policy);
    if (o.fixed_split.size() != caps.size()) {
      throw UsageError(option_name("fixed-split") + " has " + std::to_string(o.fixed_split.size()) +
                       " batches but the job has " + std::to_string(caps.size()) + " ranks (give one per rank)");
    }
    Plan p = equal_plan(o.global_batch, caps, 0);
    p.batch = o.fixed_split;
    update_accumulation(p);
    p.reason = "fixed split";
    if (const std::string problem = plan_problem(p); !problem.empty())
      throw UsageError(option_name("fixed-split") + " is not a split of " + option_name("global-batch") + " " +
                       std::to_string(o.global_batch) + ": " + problem);
    return p;
  }
  const bool have_priors = std::any_of(priors.begin(), priors.end(), [](double p) { return p > 0; });
  if (!have_priors || !policy_rebalances(o.controller.policy)) return equal_plan(o.global_batch, caps, 0);
  return initial_plan(o.global_batch, std::vector<double>(priors.size(), 0.0), caps, priors, 0);
}

}  // namespace antdt::detail
