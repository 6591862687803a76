// Fuzz target dds_ledger / dds_coordinator: Ledger::restore and Coordinator::restore.
// Input: byte 0 picks the global batch of the steps run after the restore (1..256), byte 1
// which of their offsets are left undone; the rest is the checkpoint blob. Compiled once per
// target with ANTDT_FUZZ_COORDINATOR set to 0 or 1.
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

// The offsets of a batch of `size` left undone, as byte `pick` chooses: none, or one range.
std::vector<dds::BatchRange> undone_of(std::int64_t size, unsigned pick) {
  if (size == 0 || pick % 3 == 0) return {};
  const std::int64_t begin = static_cast<std::int64_t>(pick) % size;
  return {dds::BatchRange{begin, std::min(size, begin + 1 + static_cast<std::int64_t>(pick / 3) % size)}};
}

// A few steps, some leaving part of their batch undone, checking the identity after each.
[[maybe_unused]] void exercise(dds::Ledger& ledger, std::int64_t batch, unsigned pick) {
  for (int step = 0; step < 4 && !ledger.exhausted(); ++step) {
    (void)ledger.commit(batch, undone_of(ledger.next_batch(batch).size(), pick + static_cast<unsigned>(step)));
    ledger.check_identity();
  }
}

[[maybe_unused]] void exercise(dds::Coordinator& coordinator, std::int64_t batch, unsigned pick) {
  for (int step = 0; step < 4 && !coordinator.ledger().exhausted(); ++step) {
    (void)coordinator.commit_step(batch,
                                  undone_of(coordinator.next_batch(batch).size(), pick + static_cast<unsigned>(step)));
  }
  coordinator.ledger().check_identity();
}

}  // namespace

void run(std::span<const std::byte> input) {
  if (input.size() < kPrefix) return;
  const std::int64_t batch = 1 + static_cast<std::int64_t>(byte_at(input, 0));
  const unsigned pick = byte_at(input, 1);
  const auto blob = input.subspan(kPrefix);
#if ANTDT_FUZZ_COORDINATOR
  auto restored = restore_checkpoint("Coordinator::restore", [&] { return dds::Coordinator::restore(blob); });
  const dds::Ledger& ledger = restored.ledger();
  auto restore_again = [&](std::span<const std::byte> bytes) { return dds::Coordinator::restore(bytes); };
#else
  auto restored = restore_checkpoint("Ledger::restore", [&] { return dds::Ledger::restore(blob); });
  const dds::Ledger& ledger = restored;
  auto restore_again = [&](std::span<const std::byte> bytes) { return dds::Ledger::restore(bytes); };
#endif
  must("check_identity", [&] { ledger.check_identity(); });
  // Round trip: what a restored object saves restores again and saves identically.
  const auto saved = restored.serialize();
  must("restoring a re-serialized checkpoint", [&] {
    require(restore_again(saved).serialize() == saved, "serialize(restore(serialize(restore(x)))) differs");
  });
  if (ledger.map().dataset_size() <= kExerciseMaxSamples) {
    must("steps after restore", [&] { exercise(restored, batch, pick); });
  }
}

}  // namespace antdt::fuzz
