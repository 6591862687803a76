// Rank 0's DDS logic, and every rank's Client mirror.
//
// The coverage counter is deliberately independent of the ledger: it sees only the sample
// indices of committed runs (through ShardMap) and keeps one bit per index per open epoch,
// so a ledger bug that commits a range twice or declares an epoch complete too early shows
// up as duplicated or missing indices, not as a silently consistent ledger.
#include <algorithm>
#include <bit>
#include <optional>
#include <string>

#include "antdt/error.hpp"
#include "core/bytes.hpp"
#include "dds/dds.hpp"

namespace antdt::dds {

namespace {
constexpr std::uint64_t kCoordinatorMagic = 0x5244524F4F435344ULL;  // "DSCOORDR"
// Version 2 stores each open epoch's coverage bitmap either as its maximal runs of set bits
// (IndexRange pairs, 16 bytes a run) or as the raw N/8 bytes, whichever is smaller: committed
// samples come in runs of whole shards and grants, so a 2.56e9-sample epoch usually saves in
// kilobytes to megabytes instead of 320 MB, and tiny shards in a shuffled order never cost
// more than the bitmap. The choice depends only on the bits, so the encoding is canonical.
// Version 1 (always the raw bitmap) is still read.
constexpr std::uint32_t kCoordinatorVersion = 2;
constexpr std::uint32_t kCoordinatorBitmapVersion = 1;
constexpr std::uint8_t kCoverageBitmap = 0, kCoverageRuns = 1;

std::size_t words_for(std::int64_t n) { return static_cast<std::size_t>((n + 63) / 64); }
// Runs are the smaller encoding of a bitmap of `words` words when 16 x runs < 8 x words.
bool runs_are_smaller(std::size_t runs, std::size_t words) { return 2 * runs < words; }

// The maximal runs of set bits of `bits`, in order, or nullopt as soon as there are too many to
// be the smaller encoding. O(words + runs): zero and all-one words are skipped a word at a time.
std::optional<std::vector<IndexRange>> runs_of(const std::vector<std::uint64_t>& bits) {
  std::vector<IndexRange> runs;
  const std::size_t words = bits.size();
  // The first bit at or after `from` that is set (want_set) or clear, or words * 64.
  const auto next = [&](std::int64_t from, bool want_set) {
    auto w = static_cast<std::size_t>(from >> 6);
    if (w >= words) return static_cast<std::int64_t>(words * 64);
    std::uint64_t word = (want_set ? bits[w] : ~bits[w]) & (~std::uint64_t{0} << static_cast<unsigned>(from & 63));
    while (word == 0) {
      if (++w == words) return static_cast<std::int64_t>(words * 64);
      word = want_set ? bits[w] : ~bits[w];
    }
    return static_cast<std::int64_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(word)));
  };
  const auto limit = static_cast<std::int64_t>(words * 64);
  for (std::int64_t at = next(0, true); at < limit;) {
    if (!runs_are_smaller(runs.size() + 1, words)) return std::nullopt;
    const std::int64_t end = next(at, false);
    runs.push_back(IndexRange{at, end});
    at = next(end, true);
  }
  return runs;
}

// Sets bits [begin, end) of `bits` a word at a time; returns how many were set already.
std::int64_t mark(std::vector<std::uint64_t>& bits, std::int64_t begin, std::int64_t end) {
  const auto first = static_cast<std::size_t>(begin >> 6), last = static_cast<std::size_t>((end - 1) >> 6);
  const std::uint64_t head = ~std::uint64_t{0} << static_cast<unsigned>(begin & 63);
  const std::uint64_t tail = ~std::uint64_t{0} >> static_cast<unsigned>(63 - ((end - 1) & 63));
  std::int64_t already = 0;
  const auto set = [&](std::size_t i, std::uint64_t mask) {
    already += std::popcount(bits[i] & mask);
    bits[i] |= mask;
  };
  if (first == last) {
    set(first, head & tail);
    return already;
  }
  set(first, head);
  for (std::size_t i = first + 1; i < last; ++i) set(i, ~std::uint64_t{0});
  set(last, tail);
  return already;
}
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
    while (ledger_.has_reserved(r)) out.push_back(*ledger_.acquire(r));
  }
  // Round robin, one piece per rank per pass, lowest rank first, until every rank holds its
  // target. Only the ranks still below target are visited: a rank's holdings grow only by its
  // own grants, so the ranks of pass k+1 are those of pass k still short after theirs, and the
  // sequence of grants is the same as visiting every rank in every pass, at O(grants) cost.
  const auto target_of = [&](int r) {
    return static_cast<std::int64_t>(prefetch_steps_) * demand[static_cast<std::size_t>(r)];
  };
  std::vector<int>& short_ranks = scratch_ranks_;
  short_ranks.clear();
  for (int r = 0; r < world; ++r) {
    if (ledger_.held(r) < target_of(r)) short_ranks.push_back(r);
  }
  while (!short_ranks.empty()) {
    std::size_t still_short = 0;
    for (const int r : short_ranks) {
      const std::int64_t target = target_of(r);
      // Grants are cut to the rank's own prefetch target, not whole shards: a slow rank then
      // never sits on a large shard that everyone waits for at the end of the last epoch.
      auto piece = ledger_.acquire(r, std::max<std::int64_t>(1, target));
      if (!piece) return out;  // max_epochs reached: nothing left for anyone
      out.push_back(*piece);
      if (ledger_.held(r) < target) short_ranks[still_short++] = r;
    }
    short_ranks.resize(still_short);
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
  for (int r : dropped) {
    if (r < 0 || r >= world) throw UsageError("dds: dropped rank " + std::to_string(r) + " out of range");
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
  std::vector<char>& is_dropped = scratch_dropped_;
  is_dropped.assign(static_cast<std::size_t>(world), 0);
  for (int r : dropped) is_dropped[static_cast<std::size_t>(r)] = 1;
  StepResult result;
  const std::size_t completed_before = ledger_.completed_list().size();
  for (int r = 0; r < world; ++r) {
    const std::int64_t c = consumed[static_cast<std::size_t>(r)];
    // Only commit_step consumes this ledger and it commits (or drops) at once, so a rank that
    // consumed nothing this step has nothing to count, commit or return.
    if (c == 0) continue;
    scratch_runs_.clear();
    ledger_.consume(r, c, scratch_runs_);
    if (is_dropped[static_cast<std::size_t>(r)] != 0) {
      result.returned += ledger_.drop(r);
      continue;
    }
    for (const auto& run : scratch_runs_) count(run);
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
    fresh.seen.assign(words_for(n), 0);
    open_coverage_.push_back(std::move(fresh));
    open = open_coverage_.end() - 1;
  }
  if (open->seen.empty()) {  // restored: build the bitmap from the checkpoint's runs
    open->seen.assign(words_for(n), 0);
    for (const IndexRange& r : open->restored) (void)mark(open->seen, r.begin, r.end);
    open->restored = {};
  }
  scratch_ranges_.clear();
  ledger_.map().append_index_ranges(run, scratch_ranges_);
  std::int64_t counted = 0;
  for (const IndexRange& range : scratch_ranges_) {
    ANTDT_ASSERT(0 <= range.begin && range.begin < range.end && range.end <= n,
                 "ShardMap produced an index outside the data set");
    open->duplicated += mark(open->seen, range.begin, range.end);
    counted += range.end - range.begin;
  }
  ANTDT_ASSERT(counted == run.size(), "ShardMap's index ranges do not hold one index per position");
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
  for (const IndexRange& r : open->restored) seen += r.end - r.begin;  // never counted since a restore
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
  const std::size_t words = words_for(ledger_.map().dataset_size());
  for (const auto& c : open_coverage_) {
    w.put(c.epoch);
    w.put(c.committed);
    w.put(c.duplicated);
    if (c.seen.empty()) {  // restored and not counted since: its runs, or the bitmap they make
      if (runs_are_smaller(c.restored.size(), words)) {
        w.put(kCoverageRuns);
        w.put_vector(c.restored);
        continue;
      }
      std::vector<std::uint64_t> bits(words, 0);
      for (const IndexRange& r : c.restored) (void)mark(bits, r.begin, r.end);
      w.put(kCoverageBitmap);
      w.put_vector(bits);
    } else if (const auto runs = runs_of(c.seen)) {
      w.put(kCoverageRuns);
      w.put_vector(*runs);
    } else {
      w.put(kCoverageBitmap);
      w.put_vector(c.seen);
    }
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
  for (std::size_t i = 0; i < open.size(); ++i) {
    const auto& c = open[i];
    std::int64_t seen = 0;
    if (!c.seen.empty()) {  // a version-1 bitmap
      if (c.seen.size() != words_for(n)) fail(c.epoch, "the bitmap does not match the data set size");
      if (n % 64 != 0 && (c.seen.back() >> static_cast<unsigned>(n % 64)) != 0)
        fail(c.epoch, "the bitmap marks indices past the data set");
      for (const std::uint64_t word : c.seen) seen += std::popcount(word);
    } else {  // runs: each inside [0, N), in order, disjoint and not touching (maximal runs)
      std::int64_t previous_end = -1;
      for (const IndexRange& r : c.restored) {
        if (r.begin < 0 || r.begin >= r.end || r.end > n || r.begin <= previous_end) {
          fail(c.epoch, "the run [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                            ") of covered indices is empty, outside [0, " + std::to_string(n) +
                            "), or not after the previous run with a gap");
        }
        seen += r.end - r.begin;
        previous_end = r.end;
      }
    }
    if (c.duplicated < 0 || c.duplicated > kMaxCoverageCount || c.committed != seen + c.duplicated) {
      fail(c.epoch, "committed " + std::to_string(c.committed) + " and duplicated " + std::to_string(c.duplicated) +
                        " break committed == " + std::to_string(seen) + " indices covered + duplicated" +
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
    if (version != kCoordinatorVersion && version != kCoordinatorBitmapVersion) {
      throw CheckpointError("DDS coordinator checkpoint version " + std::to_string(version) +
                            ", this build reads versions " + std::to_string(kCoordinatorBitmapVersion) + " and " +
                            std::to_string(kCoordinatorVersion));
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
      const std::uint8_t encoding = version == kCoordinatorBitmapVersion ? kCoverageBitmap : r.get<std::uint8_t>();
      if (encoding == kCoverageBitmap) {
        c.seen = r.get_vector<std::uint64_t>();
        if (c.seen.empty()) throw CheckpointError("DDS coordinator checkpoint: an empty coverage bitmap");
      } else if (encoding == kCoverageRuns) {
        c.restored = r.get_vector<IndexRange>();
      } else {
        throw CheckpointError("DDS coordinator checkpoint: unknown coverage encoding " + std::to_string(encoding));
      }
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
    Grant& front = grants_[first_];
    const std::int64_t used = std::min(n, front.size());
    front.begin += used;
    held_ -= used;
    n -= used;
    if (front.begin == front.end) ++first_;
  }
  if (first_ == grants_.size()) {
    clear();
  } else if (2 * first_ >= grants_.size()) {
    grants_.erase(grants_.begin(), grants_.begin() + static_cast<std::ptrdiff_t>(first_));
    first_ = 0;
  }
  return indices;
}

std::vector<std::int64_t> Client::peek(std::int64_t k) const {
  if (k < 0) throw UsageError("dds: Client: a count of positions must be >= 0, got " + std::to_string(k));
  std::vector<std::int64_t> indices;
  indices.reserve(static_cast<std::size_t>(std::min(k, held_)));
  for (auto g = grants_.begin() + static_cast<std::ptrdiff_t>(first_); k > 0 && g != grants_.end(); ++g) {
    const std::int64_t n = std::min(k, g->size());
    map_.append_indices(Grant{g->epoch, g->shard, g->begin, g->begin + n, g->rank}, indices);
    k -= n;
  }
  return indices;
}

void Client::clear() {
  grants_.clear();
  first_ = 0;
  held_ = 0;
}

}  // namespace antdt::dds
