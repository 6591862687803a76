// Fuzz targets controller / monitor: Controller::restore and Monitor::restore. Compiled once
// per target with ANTDT_FUZZ_MONITOR set to 0 or 1.
//
// controller input: byte 0 picks how the options meet the saved state (0: all from the
// checkpoint; 1: another world size with one cap for all; 2: another global batch) and the
// policy, byte 1 the world size / cap / global batch, byte 2 the window; the rest is the blob.
// monitor input: the blob.
#include <limits>
#include <numeric>
#include <vector>

#include "controller/controller.hpp"
#include "core/plan_rules.hpp"
#include "core/step_record.hpp"
#include "fuzz_target.hpp"
#include "monitor/monitor.hpp"

#ifndef ANTDT_FUZZ_MONITOR
#define ANTDT_FUZZ_MONITOR 0
#endif

namespace antdt::fuzz {

namespace {

// Stats of one step: rank r runs at 100 + 10 r samples/s on `batch` samples.
std::vector<RankStepStats> stats_for(const std::vector<std::int64_t>& batch) {
  std::vector<RankStepStats> stats(batch.size());
  for (std::size_t r = 0; r < batch.size(); ++r) {
    stats[r].samples = batch[r];
    stats[r].micro_steps = 1;
    stats[r].compute_seconds = static_cast<double>(batch[r]) / (100.0 + 10.0 * static_cast<double>(r));
    stats[r].reduce_seconds = 0.01;
  }
  return stats;
}

// Room for a few more steps after the last recorded one.
bool has_steps_left(std::int64_t last_step) { return last_step < std::numeric_limits<std::int64_t>::max() - 8; }

[[maybe_unused]] void check_plan(const Controller& c) {
  const Plan& p = c.plan();
  const auto& o = c.options();
  require(p.world_size() == o.world_size, "the restored plan's world size differs from the controller's");
  require(c.monitor().world_size() == o.world_size, "the restored monitor's world size differs");
  require(p.micro_batch_cap == o.caps, "the restored plan's caps differ from the controller's");
  require(p.accumulation.size() == p.batch.size(), "the restored plan has no accumulation per rank");
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < p.batch.size(); ++i) {
    require(p.batch[i] >= 0, "the restored plan has a negative batch");
    require(p.micro_batch_cap[i] >= 1, "the restored plan has a cap below 1");
    require(p.accumulation[i] == (p.batch[i] == 0 ? 0 : ceil_div(p.batch[i], p.micro_batch_cap[i])),
            "the restored plan's accumulation does not match its batch and caps");
    sum += p.batch[i];
  }
  require(sum == o.global_batch && p.global_batch == o.global_batch, "the restored plan does not sum to B");
}

}  // namespace

void run(std::span<const std::byte> input) {
#if ANTDT_FUZZ_MONITOR
  auto m = restore_checkpoint("Monitor::restore", [&] { return Monitor::restore(input); });
  const auto saved = m.serialize();
  must("restoring a re-serialized monitor",
       [&] { require(Monitor::restore(saved).serialize() == saved, "monitor round trip differs"); });
  if (!has_steps_left(m.last_step())) return;
  must("recording after restore", [&] {
    const std::vector<std::int64_t> batch(static_cast<std::size_t>(m.world_size()), 4);
    for (std::int64_t k = 1; k <= 3; ++k) m.record(m.last_step() + k, stats_for(batch));
    (void)m.median_throughput();
    (void)m.recent_peak(0, 2);
  });
#else
  constexpr std::size_t kPrefix = 3;
  if (input.size() < kPrefix) return;
  const unsigned mode = byte_at(input, 0) % 3;
  const unsigned value = byte_at(input, 1);
  ControllerOptions options;
  options.policy = (byte_at(input, 0) / 3) % 2 == 0 ? "dd" : "static";
  options.window = 1 + static_cast<int>(byte_at(input, 2) % 24);
  options.warmup_steps = 0;
  options.min_interval = 1;
  options.persistence = 2;
  if (mode == 1) {
    options.world_size = 1 + static_cast<int>(value % 8);
    options.caps = {1 + static_cast<std::int64_t>(value / 8)};
  } else if (mode == 2) {
    options.global_batch = 1 + static_cast<std::int64_t>(value) * 3;
  }
  const auto blob = input.subspan(kPrefix);
  auto c = restore_checkpoint("Controller::restore", [&] { return Controller::restore(blob, options); });
  check_plan(c);
  const auto saved = c.serialize();
  must("restoring a re-serialized controller",
       [&] { require(Controller::restore(saved, c.options()).serialize() == saved, "controller round trip differs"); });
  const std::int64_t last = c.last_step();
  if (!has_steps_left(last)) return;
  must("steps after restore", [&] {
    for (std::int64_t k = 1; k <= 4; ++k) {
      (void)c.on_step(last + k, stats_for(c.plan().batch));
      check_plan(c);
    }
    (void)c.predicted_step_seconds();
  });
#endif
}

}  // namespace antdt::fuzz
