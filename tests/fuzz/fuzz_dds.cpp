// Fuzz target dds_ledger / dds_coordinator: Ledger::restore and Coordinator::restore.
// Input: byte 0 picks the world size to restore onto (1..8), byte 1 the coordinator's
// prefetch steps (1..4); the rest is the checkpoint blob. Compiled once per target with
// ANTDT_FUZZ_COORDINATOR set to 0 or 1.
#include <algorithm>
#include <vector>

#include "dds/dds.hpp"
#include "fuzz_target.hpp"

#ifndef ANTDT_FUZZ_COORDINATOR
#define ANTDT_FUZZ_COORDINATOR 0
#endif

namespace antdt::fuzz {

namespace {

constexpr std::size_t kPrefix = 2;
// The coverage counter keeps one bit per sample for each open epoch (by design); the
// operations after a restore run only where that bitmap is small.
constexpr std::int64_t kExerciseMaxSamples = std::int64_t{1} << 22;

// A few rounds of acquire/consume/commit plus one failure, checking the identity after each.
[[maybe_unused]] void exercise(dds::Ledger& ledger) {
  for (int round = 0; round < 3; ++round) {
    for (int r = 0; r < ledger.world_size(); ++r) {
      if (!ledger.acquire(r, 7)) return;
      (void)ledger.consume(r, 5);
      (void)ledger.commit(r);
    }
    ledger.check_identity();
  }
  (void)ledger.fail_rank(0);
  ledger.check_identity();
}

[[maybe_unused]] void exercise(dds::Coordinator& coordinator) {
  const int world = coordinator.ledger().world_size();
  for (int step = 0; step < 3; ++step) {
    std::vector<std::int64_t> demand(static_cast<std::size_t>(world), 3);
    (void)coordinator.grant(demand);
    std::vector<std::int64_t> consumed(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r)
      consumed[static_cast<std::size_t>(r)] = std::min<std::int64_t>(3, coordinator.ledger().held(r));
    (void)coordinator.commit_step(consumed, step == 1 ? std::vector<int>{world - 1} : std::vector<int>{});
  }
  (void)coordinator.fail_rank(0);
  coordinator.ledger().check_identity();
}

}  // namespace

void run(std::span<const std::byte> input) {
  if (input.size() < kPrefix) return;
  const int world = 1 + static_cast<int>(byte_at(input, 0) % 8);
  const int prefetch = 1 + static_cast<int>(byte_at(input, 1) % 4);
  const auto blob = input.subspan(kPrefix);
#if ANTDT_FUZZ_COORDINATOR
  auto restored =
      restore_checkpoint("Coordinator::restore", [&] { return dds::Coordinator::restore(blob, world, prefetch); });
  const dds::Ledger& ledger = restored.ledger();
  auto restore_again = [&](std::span<const std::byte> bytes) {
    return dds::Coordinator::restore(bytes, world, prefetch);
  };
#else
  (void)prefetch;
  auto restored = restore_checkpoint("Ledger::restore", [&] { return dds::Ledger::restore(blob, world); });
  const dds::Ledger& ledger = restored;
  auto restore_again = [&](std::span<const std::byte> bytes) { return dds::Ledger::restore(bytes, world); };
#endif
  must("check_identity", [&] { ledger.check_identity(); });
  require(ledger.world_size() == world, "restored onto the wrong world size");
  // Round trip: what a restored object saves restores again and saves identically.
  const auto saved = restored.serialize();
  must("restoring a re-serialized checkpoint", [&] {
    require(restore_again(saved).serialize() == saved, "serialize(restore(serialize(restore(x)))) differs");
  });
  if (ledger.map().dataset_size() <= kExerciseMaxSamples) must("operations after restore", [&] { exercise(restored); });
}

}  // namespace antdt::fuzz
