#include "core/option_names.hpp"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <utility>

#include "antdt/options.hpp"

namespace antdt {

namespace {
std::atomic<OptionNames> g_style{OptionNames::fields};

// Every option's key and the JobOptions field it sets.
constexpr std::pair<std::string_view, std::string_view> kFields[] = {
    {"global-batch", "session.global_batch"},
    {"steps", "session.max_steps"},
    {"epochs", "session.max_epochs"},
    {"micro-batch-cap", "session.micro_batch_cap"},
    {"shard-size", "session.shard_size"},
    {"data-seed", "session.seed"},
    {"shuffle-within-shard", "session.shuffle_within_shard"},
    {"reply-lag", "session.reply_lag"},
    {"policy", "session.controller.policy"},
    {"backup-workers", "session.backup_workers"},
    {"nd-chunks", "session.chunks_per_share"},
    {"nd-first-chunk", "session.first_chunk"},
    {"nd-pool", "session.pool_mechanism"},
    {"max-restarts", "session.controller.restart.max_restarts"},
    {"restart-cooldown", "session.controller.restart.cooldown_steps"},
    {"fixed-split", "session.fixed_split"},
    {"min-gain", "session.controller.min_gain"},
    {"min-pool-gain", "session.controller.min_pool_gain"},
    {"min-interval", "session.controller.min_interval"},
    {"window", "session.controller.window"},
    {"persistence", "session.controller.persistence"},
    {"rejoin-after", "session.controller.rejoin_after"},
    {"emulate-speed", "session.emulation.speeds"},
    {"emulate-transient", "session.emulation.transient_*"},
    {"emulate-schedule", "session.emulation.schedule"},
    {"virtual-device", "session.emulation.virtual_seconds_per_sample"},
    {"emulate-seed", "session.emulation.seed"},
    {"step-timeout", "session.step_timeout_seconds"},
    {"wait-spin", "session.wait_spin_seconds"},
    {"checkpoint-dir", "checkpoint.dir"},
    {"checkpoint-every", "checkpoint.every_steps"},
    {"checkpoint-minutes", "checkpoint.every_minutes"},
    {"checkpoint-keep", "checkpoint.keep"},
    {"resume", "checkpoint.resume"},
    {"checkpoint-overwrite", "checkpoint.overwrite"},
    {"summary-json", "output.summary_json"},
    {"metrics", "output.metrics"},
    {"timeline", "output.timeline"},
    {"progress", "output.progress"},
    {"progress-every", "output.progress_every"},
    {"log-level", "output.log_level"},
    {"quiet", "output.quiet"},
    {"sample-log", "output.sample_log"},
    {"stop-signals", "stop_signals"},
    {"probe", "probe"},
    {"fail-at-step", "faults.fail_at_step"},
    {"fail-rank", "faults.fail_rank"},
    {"fail-in-checkpoint", "faults.fail_in_checkpoint"},
};
}  // namespace

void set_option_names(OptionNames style) noexcept { g_style.store(style, std::memory_order_relaxed); }

namespace detail {

std::string option_name(std::string_view key) {
  switch (g_style.load(std::memory_order_relaxed)) {
    case OptionNames::flags:
      return "--" + std::string(key);
    case OptionNames::keywords: {
      std::string k(key);
      std::replace(k.begin(), k.end(), '-', '_');
      return k;
    }
    case OptionNames::fields:
      break;
  }
  const auto* it = std::find_if(std::begin(kFields), std::end(kFields), [&](const auto& f) { return f.first == key; });
  if (it == std::end(kFields)) return "--" + std::string(key);
  return "JobOptions::" + std::string(it->second);
}

}  // namespace detail

}  // namespace antdt
