// Rank 0's DDS logic, and every rank's Client mirror.
//
// The coverage counter is deliberately independent of the ledger: it sees only the sample
// indices of committed runs (through ShardMap) and keeps one bit per index per open epoch,
// so a ledger bug that commits a range twice or declares an epoch complete too early shows
// up as duplicated or missing indices, not as a silently consistent ledger.
#include <algorithm>
#include <bit>
#include <string>

#include "antdt/dds.hpp"
#include "antdt/error.hpp"
#include "core/bytes.hpp"

namespace antdt::dds {

namespace {
constexpr std::uint64_t kCoordinatorMagic = 0x5244524F4F435344ULL;  // "DSCOORDR"
constexpr std::uint32_t kCoordinatorVersion = 1;
}  // namespace

Coordinator::Coordinator(const LedgerOptions& options, int world_size, int prefetch_steps)
    : Coordinator(Ledger(options, world_size), prefetch_steps) {}

Coordinator::Coordinator(Ledger ledger, int prefetch_steps)
    : ledger_(std::move(ledger)), prefetch_steps_(prefetch_steps) {
  if (prefetch_steps < 1)
    throw UsageError("dds: prefetch_steps must be at least 1, got " + std::to_string(prefetch_steps));
}

std::vector<Grant> Coordinator::grant(const std::vector<std::int64_t>& demand) {
  const int world = ledger_.world_size();
  if (static_cast<int>(demand.size()) != world) {
    throw UsageError("dds: grant needs one demand per rank: got " + std::to_string(demand.size()) + " for " +
                     std::to_string(world) + " ranks");
  }
  for (int r = 0; r < world; ++r) {
    if (demand[static_cast<std::size_t>(r)] < 0) {
      throw UsageError("dds: demand of rank " + std::to_string(r) + " is negative");
    }
  }
  std::vector<Grant> out;
  // Restored tails first, all of them, so every rank's holdings equal the uninterrupted run's.
  for (int r = 0; r < world; ++r) {
    while (ledger_.reserved(r) > 0) out.push_back(*ledger_.acquire(r));
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < world; ++r) {
      const std::int64_t target = static_cast<std::int64_t>(prefetch_steps_) * demand[static_cast<std::size_t>(r)];
      if (ledger_.held(r) >= target) continue;
      // Grants are cut to the rank's own prefetch target, not whole shards: a slow rank then
      // never sits on a large shard that everyone waits for at the end of the last epoch.
      auto piece = ledger_.acquire(r, std::max<std::int64_t>(1, target));
      if (!piece) return out;  // max_epochs reached: nothing left for anyone
      out.push_back(*piece);
      progress = true;
    }
  }
  return out;
}

Coordinator::StepResult Coordinator::commit_step(const std::vector<std::int64_t>& consumed,
                                                 const std::vector<int>& dropped) {
  const int world = ledger_.world_size();
  if (static_cast<int>(consumed.size()) != world) {
    throw UsageError("dds: commit_step needs one count per rank: got " + std::to_string(consumed.size()) + " for " +
                     std::to_string(world) + " ranks");
  }
  std::vector<bool> is_dropped(static_cast<std::size_t>(world), false);
  for (int r : dropped) {
    if (r < 0 || r >= world) throw UsageError("dds: dropped rank " + std::to_string(r) + " out of range");
    is_dropped[static_cast<std::size_t>(r)] = true;
  }
  // Validate everything before changing anything.
  for (int r = 0; r < world; ++r) {
    const std::int64_t c = consumed[static_cast<std::size_t>(r)];
    const std::int64_t held = ledger_.held(r);
    if (c < 0 || c > held) {
      throw Error("dds: rank " + std::to_string(r) + " reports " + std::to_string(c) + " samples consumed but held " +
                  std::to_string(held) + "; its client and the coordinator disagree");
    }
  }
  StepResult result;
  const std::size_t completed_before = ledger_.completed_list().size();
  for (int r = 0; r < world; ++r) {
    const auto runs = ledger_.consume(r, consumed[static_cast<std::size_t>(r)]);
    if (is_dropped[static_cast<std::size_t>(r)]) {
      result.returned += ledger_.drop(r);
      continue;
    }
    for (const auto& run : runs) count(run);
    result.committed += ledger_.commit(r);
  }
  const auto& completed = ledger_.completed_list();
  for (std::size_t i = completed_before; i < completed.size(); ++i) {
    finish_epoch(completed[i]);
    result.completed_epochs.push_back(completed[i]);
  }
  ledger_.check_identity();
  return result;
}

void Coordinator::count(const Grant& run) {
  const std::int64_t n = ledger_.map().dataset_size();
  auto open = std::find_if(open_coverage_.begin(), open_coverage_.end(),
                           [&](const OpenCoverage& c) { return c.epoch == run.epoch; });
  if (open == open_coverage_.end()) {
    for (auto& done : coverage_) {
      if (done.epoch == run.epoch) {  // a commit after the epoch completed: all of it is extra
        done.committed += run.size();
        done.duplicated += run.size();
        return;
      }
    }
    OpenCoverage fresh;
    fresh.epoch = run.epoch;
    fresh.seen.assign(static_cast<std::size_t>((n + 63) / 64), 0);
    open_coverage_.push_back(std::move(fresh));
    open = open_coverage_.end() - 1;
  }
  scratch_.clear();
  ledger_.map().append_indices(run, scratch_);
  for (const std::int64_t index : scratch_) {
    ANTDT_ASSERT(index >= 0 && index < n, "ShardMap produced an index outside the data set");
    auto& word = open->seen[static_cast<std::size_t>(index / 64)];
    const std::uint64_t bit = std::uint64_t{1} << static_cast<unsigned>(index % 64);
    if ((word & bit) != 0) ++open->duplicated;
    word |= bit;
  }
  open->committed += run.size();
}

void Coordinator::finish_epoch(std::int64_t epoch) {
  const std::int64_t n = ledger_.map().dataset_size();
  auto open = std::find_if(open_coverage_.begin(), open_coverage_.end(),
                           [&](const OpenCoverage& c) { return c.epoch == epoch; });
  if (open == open_coverage_.end()) {  // nothing was ever counted for it
    coverage_.push_back(EpochCoverage{epoch, 0, n, 0});
    return;
  }
  std::int64_t seen = 0;
  for (const std::uint64_t word : open->seen) seen += std::popcount(word);
  coverage_.push_back(EpochCoverage{epoch, open->committed, n - seen, open->duplicated});
  open_coverage_.erase(open);
}

std::int64_t Coordinator::fail_rank(int rank) { return ledger_.fail_rank(rank); }
std::int64_t Coordinator::drop(int rank) { return ledger_.drop(rank); }

std::vector<std::byte> Coordinator::serialize() const {
  detail::ByteWriter w;
  w.put(kCoordinatorMagic);
  w.put(kCoordinatorVersion);
  w.put_vector(ledger_.serialize());
  w.put_vector(coverage_);
  w.put<std::uint64_t>(open_coverage_.size());
  for (const auto& c : open_coverage_) {
    w.put(c.epoch);
    w.put(c.committed);
    w.put(c.duplicated);
    w.put_vector(c.seen);
  }
  return w.take();
}

// The coverage counter's own invariants, so that a corrupt checkpoint cannot make later
// counting overflow. It is deliberately not compared with the ledger: it exists to catch a
// ledger (or a replayed checkpoint) that disagrees with it.
void Coordinator::check_coverage(std::int64_t n, const std::vector<EpochCoverage>& coverage,
                                 const std::vector<OpenCoverage>& open) {
  const auto fail = [](std::int64_t epoch, const std::string& what) {
    throw CheckpointError("DDS coordinator checkpoint: coverage of epoch " + std::to_string(epoch) + ": " + what);
  };
  for (const auto& c : coverage) {
    // committed = distinct indices seen (n - missing) + duplicated.
    if (c.missing < 0 || c.missing > n || c.duplicated < 0 || c.duplicated > kMaxCoverageCount ||
        c.committed != n - c.missing + c.duplicated) {
      fail(c.epoch, "committed " + std::to_string(c.committed) + ", missing " + std::to_string(c.missing) +
                        " and duplicated " + std::to_string(c.duplicated) +
                        " break committed == dataset size - missing + duplicated, missing in [0, " + std::to_string(n) +
                        "], duplicated in [0, 2^62]");
    }
  }
  const auto words = static_cast<std::size_t>((n + 63) / 64);
  for (std::size_t i = 0; i < open.size(); ++i) {
    const auto& c = open[i];
    if (c.seen.size() != words) fail(c.epoch, "the bitmap does not match the data set size");
    if (n % 64 != 0 && (c.seen.back() >> static_cast<unsigned>(n % 64)) != 0)
      fail(c.epoch, "the bitmap marks indices past the data set");
    std::int64_t seen = 0;
    for (const std::uint64_t word : c.seen) seen += std::popcount(word);
    if (c.duplicated < 0 || c.duplicated > kMaxCoverageCount || c.committed != seen + c.duplicated) {
      fail(c.epoch, "committed " + std::to_string(c.committed) + " and duplicated " + std::to_string(c.duplicated) +
                        " break committed == " + std::to_string(seen) + " indices in the bitmap + duplicated" +
                        " (duplicated in [0, 2^62])");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (open[j].epoch == c.epoch) fail(c.epoch, "the epoch has two bitmaps");
    }
  }
}

Coordinator Coordinator::restore(std::span<const std::byte> bytes, int world_size, int prefetch_steps) {
  std::vector<std::byte> ledger_bytes;
  std::vector<EpochCoverage> coverage;
  std::vector<OpenCoverage> open;
  try {
    detail::ByteReader r(bytes);
    if (r.get<std::uint64_t>() != kCoordinatorMagic) throw CheckpointError("DDS coordinator checkpoint: bad magic");
    const auto version = r.get<std::uint32_t>();
    if (version != kCoordinatorVersion) {
      throw CheckpointError("DDS coordinator checkpoint version " + std::to_string(version) +
                            ", this build reads version " + std::to_string(kCoordinatorVersion));
    }
    ledger_bytes = r.get_vector<std::byte>();
    coverage = r.get_vector<EpochCoverage>();
    const auto open_count = r.get<std::uint64_t>();
    if (open_count > r.remaining()) throw CheckpointError("DDS coordinator checkpoint: bad coverage count");
    for (std::uint64_t i = 0; i < open_count; ++i) {
      OpenCoverage c;
      c.epoch = r.get<std::int64_t>();
      c.committed = r.get<std::int64_t>();
      c.duplicated = r.get<std::int64_t>();
      c.seen = r.get_vector<std::uint64_t>();
      open.push_back(std::move(c));
    }
    if (!r.done()) throw CheckpointError("DDS coordinator checkpoint: trailing bytes");
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(std::string("DDS coordinator checkpoint is corrupt or truncated: ") + e.what());
  }
  Coordinator coordinator(Ledger::restore(ledger_bytes, world_size), prefetch_steps);
  check_coverage(coordinator.ledger_.map().dataset_size(), coverage, open);
  coordinator.coverage_ = std::move(coverage);
  coordinator.open_coverage_ = std::move(open);
  return coordinator;
}

// --- Client -----------------------------------------------------------------------------

Client::Client(const LedgerOptions& options) : map_(options) {}

void Client::add(const std::vector<Grant>& grants, int my_rank) {
  for (const auto& g : grants) {
    if (g.rank != my_rank) continue;
    // The grants come off the wire: a run outside this rank's shard map is a corrupt reply.
    // All are checked before any is added.
    if (g.epoch < 0 || g.shard < 0 || g.shard >= map_.num_shards() || g.begin < 0 || g.begin > g.end ||
        g.end > map_.shard_length(g.shard)) {
      throw Error("dds: grant of epoch " + std::to_string(g.epoch) + ", shard " + std::to_string(g.shard) + ", [" +
                  std::to_string(g.begin) + ", " + std::to_string(g.end) + ") is outside the data set's " +
                  std::to_string(map_.num_shards()) + " shards");
    }
  }
  for (const auto& g : grants) {
    if (g.rank != my_rank || g.size() == 0) continue;
    grants_.push_back(g);
    held_ += g.size();
  }
}

std::vector<std::int64_t> Client::take(std::int64_t k) {
  std::vector<std::int64_t> indices = peek(k);
  // Consume exactly the positions peek listed, front grant first.
  for (auto n = static_cast<std::int64_t>(indices.size()); n > 0;) {
    Grant& front = grants_.front();
    const std::int64_t used = std::min(n, front.size());
    front.begin += used;
    held_ -= used;
    n -= used;
    if (front.begin == front.end) grants_.pop_front();
  }
  return indices;
}

std::vector<std::int64_t> Client::peek(std::int64_t k) const {
  if (k < 0) throw UsageError("dds: Client: a count of positions must be >= 0, got " + std::to_string(k));
  std::vector<std::int64_t> indices;
  indices.reserve(static_cast<std::size_t>(std::min(k, held_)));
  for (auto g = grants_.begin(); k > 0 && g != grants_.end(); ++g) {
    const std::int64_t n = std::min(k, g->size());
    map_.append_indices(Grant{g->epoch, g->shard, g->begin, g->begin + n, g->rank}, indices);
    k -= n;
  }
  return indices;
}

void Client::clear() {
  grants_.clear();
  held_ = 0;
}

}  // namespace antdt::dds
